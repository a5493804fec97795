#!/usr/bin/env bash
# Every metric the alert rules and the dashboard name exists, with the labels they use: starts
# a gateway in front of the example service, a relay and a consumer against throwaway
# PostgreSQL and nats-server, and idem sweep, scrapes each /metrics, and checks the rules and
# the dashboard against what they export (check_monitoring.py metrics).
#
#   metrics_exist_test.sh BIN_DIR SOURCE_DIR   (BIN_DIR holds idem and example_service)
set -euo pipefail
bin=$(cd "$1" && pwd)
source_dir=$(cd "$2" && pwd)
source "$source_dir/tests/deploy/lib.sh"
deploy_setup metrics_exist_test "$source_dir"

start_postgres_and_nats
"$bin/idem" migrate --store "$db" >"$work/migrate.log" 2>&1 || fail "idem migrate failed"

spawn service "$work/service.log" "$bin/example_service" 127.0.0.1:0
service=$(address_after "$work/service.log" "listening on" "$spawned_pid")

spawn gateway "$work/gateway.log" "$bin/idem" gateway --listen 127.0.0.1:0 \
  --admin-listen 127.0.0.1:0 --upstream "http://$service" --store "sqlite:$work/gateway.db"
admins=("$(address_after "$work/gateway.log" "admin on" "$spawned_pid")")

spawn relay "$work/relay.log" "$bin/idem" relay --store "$db" --nats "$nats" \
  --create-stream EVENTS --subjects 'events.>' --duplicate-window 2m --admin-listen 127.0.0.1:0
admins+=("$(address_after "$work/relay.log" "admin on" "$spawned_pid")")
# The stream exists once the relay serves; the consumer needs it.
for _ in $(seq 500); do
  curl -fsS "http://${admins[1]}/readyz" >/dev/null 2>&1 && break
  sleep 0.02
done

spawn consume "$work/consume.log" "$bin/idem" consume --nats "$nats" --stream EVENTS \
  --consumer metrics-test --deliver "http://$service/anything" --admin-listen 127.0.0.1:0
admins+=("$(address_after "$work/consume.log" "admin on" "$spawned_pid")")

spawn sweep "$work/sweep.log" "$bin/idem" sweep --store "$db" --admin-listen 127.0.0.1:0
admins+=("$(address_after "$work/sweep.log" "admin on" "$spawned_pid")")

scrapes=()
for admin in "${admins[@]}"; do
  file="$work/metrics-${admin//[:.]/_}.txt"
  curl -fsS "http://$admin/metrics" >"$file" || fail "no /metrics on $admin"
  scrapes+=("$file")
done
python3 "$source_dir/tests/deploy/check_monitoring.py" metrics "$source_dir" "${scrapes[@]}"
