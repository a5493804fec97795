#!/usr/bin/env bash
# README command one: install dependencies, build, and run the main job: `idem gateway` on the
# embedded SQLite store in front of the bundled example service. It sends one request twice with
# the same Idempotency-Key to show the replay, prints a curl line to try it yourself, and serves
# until Ctrl-C (SIGTERM drains requests in flight, then both processes stop).
#
#   scripts/run.sh            serve on 127.0.0.1:8080 (admin 127.0.0.1:9090, service :9000)
#   scripts/run.sh --once     show the replay, then stop (a smoke test of this script)
#
# Environment: IDEM_LISTEN, IDEM_ADMIN_LISTEN, IDEM_SERVICE_LISTEN (HOST:PORT; port 0 picks a
# free port), IDEM_STORE (default sqlite:.idem/idem.db).
set -euo pipefail
cd "$(dirname "$0")/.."

once=false
case "${1:-}" in
  --once) once=true ;;
  "") ;;
  -h | --help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "scripts/run.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
esac

scripts/install-deps.sh
# Only what this script runs (the test command builds everything).
scripts/build.sh release idem example_service

listen=${IDEM_LISTEN:-127.0.0.1:8080}
admin_listen=${IDEM_ADMIN_LISTEN:-127.0.0.1:9090}
service_listen=${IDEM_SERVICE_LISTEN:-127.0.0.1:9000}
mkdir -p .idem
store=${IDEM_STORE:-sqlite:.idem/idem.db}
service_log=.idem/example-service.log
gateway_log=.idem/gateway.log

service_pid=""
gateway_pid=""
stop() {  # on exit: SIGTERM to both by PID, wait for them, keep the script's own exit status
  local status=$?
  set +e  # a child's own exit status (143 after SIGTERM) must not end this function early
  if [[ -n $gateway_pid ]]; then kill -TERM "$gateway_pid" 2>/dev/null; wait "$gateway_pid"; fi
  if [[ -n $service_pid ]]; then kill -TERM "$service_pid" 2>/dev/null; wait "$service_pid"; fi
  exit "$status"
}
trap stop EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

source bench/lib/address-after.sh

build/release/example_service "$service_listen" >"$service_log" 2>&1 &
service_pid=$!
service_address=$(address_after "$service_log" "listening on" "$service_pid")

# The gateway's own output (one line per request) goes to the terminal and to its log.
build/release/idem gateway --listen "$listen" --admin-listen "$admin_listen" \
  --upstream "http://$service_address" --store "$store" > >(tee "$gateway_log") 2>&1 &
gateway_pid=$!
gateway_address=$(address_after "$gateway_log" "gateway on" "$gateway_pid")
admin_address=$(address_after "$gateway_log" "admin on" "$gateway_pid")

key="demo-$(date +%s)-$RANDOM"
request=(curl -sS -i -X POST "http://$gateway_address/v1/payments"
  -H "Idempotency-Key: $key" -H "Authorization: Bearer demo-tenant"
  -H "Content-Type: application/json" -d '{"amount":1000,"currency":"EUR"}')

show() {  # the status line, the replay header and the body of one response
  "${request[@]}" | tr -d '\r' | awk 'NR==1 || tolower($0) ~ /^idempotent-replayed:/ || body {print "    " $0} /^$/ {body=1}'
}
echo
echo "== first request: the example service executes it"
show
echo "== the same request again (a client retry): replayed from the store, not executed"
show
executions=$(curl -sS "http://$service_address/executions?key=$key")
echo "== the example service executed key $key $executions time(s)"
if [[ $executions != 1 ]]; then
  echo "scripts/run.sh: expected exactly one execution" >&2
  exit 1
fi

try_key="try-me-$(date +%s)"
cat <<INFO

idem gateway is serving on http://$gateway_address in front of the example service on
http://$service_address, with records in $store. Run this twice: the second answer carries
Idempotent-Replayed: true, and the service does not run again.

  curl -i -X POST http://$gateway_address/v1/payments -H 'Idempotency-Key: $try_key' -H 'Content-Type: application/json' -d '{"amount":1000}'

Metrics:  curl http://$admin_address/metrics
A record: curl 'http://$admin_address/v1/records?key=$key&tenant=Bearer%20demo-tenant'
INFO

if $once; then exit 0; fi
echo "Serving until Ctrl-C."
wait "$gateway_pid"
