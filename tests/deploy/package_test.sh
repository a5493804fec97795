#!/usr/bin/env bash
# The Debian package, built, installed and run as a user would: CPack builds idem_*.deb from
# this build directory; lintian must report no error; dpkg -i installs it (the user idem, the
# units, /etc/idem); systemd-analyze verify accepts the units; each unit's ExecStart line runs
# as the user idem in /var/lib/idem (systemd is not PID 1 here, so the test plays its part),
# with the installed config file and the test's servers given as flags (flags win over the
# file): the gateway in front of the example service, the relay and a consumer against
# throwaway PostgreSQL and nats-server. Each must serve (/readyz 200; a replayed request through
# the gateway; an outbox event through the relay and the consumer to the service), then stop on
# SIGTERM within its unit's TimeoutStopSec. Last, dpkg --purge must leave nothing behind but the
# user idem (Debian keeps system users).
#
#   package_test.sh BUILD_DIR SOURCE_DIR
#
# Needs root (exit 77, skipped, otherwise) and a machine where the package idem is not installed
# already (skipped too: the test will not replace a real installation). Runs of this test on
# one machine take turns (a lock), since they install the same package.
set -euo pipefail
build_dir=$(cd "$1" && pwd)
source_dir=$(cd "$2" && pwd)

if [[ $(id -u) -ne 0 ]]; then
  echo "package_test: SKIPPED: needs root to install the package (dpkg -i)"
  exit 77
fi
# One run at a time on this machine: they install and purge the same package.
exec 9>/run/lock/idem-package-test.lock
flock 9
if dpkg-query -W -f='${Status}' idem 2>/dev/null | grep -q "installed"; then
  echo "package_test: SKIPPED: the package idem is installed on this machine; not replacing it"
  exit 77
fi

source "$source_dir/tests/deploy/lib.sh"
deploy_setup package_test "$source_dir"
installed=false
purge_if_installed() { $installed && dpkg --purge idem >/dev/null 2>&1; return 0; }
deploy_extra_cleanup=purge_if_installed
started=$SECONDS
step() { printf 'package_test: %3d s  %s\n' $((SECONDS - started)) "$*"; }

# --- build and lint ------------------------------------------------------------------------
(cd "$build_dir" && cpack -G DEB -B "$work/package" >"$work/cpack.log" 2>&1) || fail "cpack failed"
deb=$(ls "$work"/package/idem_*_amd64.deb)
step "built $(basename "$deb") ($(du -k "$deb" | cut -f1) KiB)"
lintian --fail-on error "$deb" >"$work/lintian.log" 2>&1 || { cat "$work/lintian.log"; fail "lintian reported errors"; }
step "lintian: $(grep -c '^E:' "$work/lintian.log" || true) errors, $(grep -c '^W:' "$work/lintian.log" || true) warnings"
sed 's/^/  /' "$work/lintian.log"

# --- install -------------------------------------------------------------------------------
dpkg -i "$deb" >"$work/dpkg-install.log" 2>&1 || fail "dpkg -i failed"
installed=true
step "installed"
getent passwd idem >/dev/null || fail "the user idem was not created"
units=(/lib/systemd/system/idem-gateway.service /lib/systemd/system/idem-relay.service
  "/lib/systemd/system/idem-consume@.service" /lib/systemd/system/idem-sweep.service)
for f in /usr/bin/idem "${units[@]}" /usr/share/idem/sql/schema/records.sql \
  /usr/share/idem/prometheus/idem-alerts.yml /usr/share/idem/grafana/idem-dashboard.json \
  /usr/share/doc/idem/copyright /usr/share/doc/idem/operations.md; do
  [[ -e $f ]] || fail "$f is not installed"
done
for config in /etc/idem/*.toml; do
  [[ -e $config ]] || continue
  dpkg-query --showformat='${Conffiles}\n' --show idem | grep -q " $config " ||
    fail "$config is not a conffile"
done
# systemd-analyze verify checks the directives, the binary and the user; an instance of the
# consumer template is verified through a link named as one.
ln -s "/lib/systemd/system/idem-consume@.service" "$work/idem-consume@pkgtest.service"
systemd-analyze verify "${units[@]:0:2}" "$work/idem-consume@pkgtest.service" "${units[3]}" \
  >"$work/systemd-analyze.log" 2>&1 || { cat "$work/systemd-analyze.log"; fail "systemd-analyze verify refused a unit"; }
if grep -v -e "^$" "$work/systemd-analyze.log" | grep -q .; then
  cat "$work/systemd-analyze.log"
  fail "systemd-analyze verify printed warnings"
fi
step "systemd-analyze verify: the units are accepted"

# --- run each unit's ExecStart as the user idem ---------------------------------------------
# What systemd would do for StateDirectory=idem and WorkingDirectory=/var/lib/idem.
install -d -o idem -g idem -m 0750 /var/lib/idem
start_postgres_and_nats
/usr/bin/idem migrate --store "$db" >"$work/migrate.log" 2>&1 || fail "idem migrate failed"
spawn service "$work/service.log" "$build_dir/example_service" 127.0.0.1:0
service=$(address_after "$work/service.log" "listening on" "$spawned_pid")

unit_value() { sed -n "s/^$2=//p" "$1" | tail -1; }
# run_unit UNIT LOG CONFIG EXTRA_FLAGS...: the unit's ExecStart, its --config path replaced by
# CONFIG when given, the flags appended; as the unit's user, in its working directory.
run_unit() {
  local unit=$1 log=$2 config=$3
  shift 3
  local user exec_start dir
  user=$(unit_value "$unit" User)
  dir=$(unit_value "$unit" WorkingDirectory)
  exec_start=$(unit_value "$unit" ExecStart)
  [[ $user == idem && $dir == /var/lib/idem ]] || fail "$unit: User=$user WorkingDirectory=$dir"
  local -a command
  read -r -a command <<<"$exec_start"
  if [[ -n $config ]]; then
    for i in "${!command[@]}"; do
      [[ ${command[i]} == --config ]] && command[i + 1]=$config
    done
  fi
  spawn "$(basename "$unit")" "$log" setpriv --reuid=idem --regid=idem --init-groups -- \
    env -C "$dir" "${command[@]}" "$@"
}
ready() {  # waits until http://$1/readyz answers 200
  for _ in $(seq 500); do
    curl -fsS "http://$1/readyz" >/dev/null 2>&1 && return 0
    sleep 0.02
  done
  fail "$1/readyz never answered 200"
}
declare -A daemon_pid daemon_unit

# The gateway: the installed /etc/idem/gateway.toml, the test's upstream and free ports as flags.
run_unit "${units[0]}" "$work/gateway.log" "" --listen 127.0.0.1:0 \
  --admin-listen 127.0.0.1:0 --upstream "http://$service"
daemon_pid[gateway]=$spawned_pid daemon_unit[gateway]=${units[0]}
gateway=$(address_after "$work/gateway.log" "gateway on" "$spawned_pid")
gateway_admin=$(address_after "$work/gateway.log" "admin on" "$spawned_pid")
ready "$gateway_admin"
key="package-test-$RANDOM"
for attempt in 1 2; do
  curl -fsS -o /dev/null -D "$work/response-$attempt.txt" -X POST "http://$gateway/anything" \
    -H "Idempotency-Key: $key" -H 'Content-Type: application/json' -d '{"n":1}' ||
    fail "the gateway did not answer request $attempt"
done
grep -qi '^idempotent-replayed: true' "$work/response-2.txt" || fail "the retry was not replayed"
[[ -e /var/lib/idem/idem.db ]] || fail "the gateway's SQLite store is not in /var/lib/idem"
step "gateway (as idem): serves, replays, records in /var/lib/idem"

# The relay, the consumer and the sweep: their installed config files, the test's servers as flags.
run_unit "${units[1]}" "$work/relay.log" "" --store "$db" --nats "$nats" \
  --stream EVENTS --create-stream EVENTS --subjects 'events.>' --admin-listen 127.0.0.1:0
daemon_pid[relay]=$spawned_pid daemon_unit[relay]=${units[1]}
ready "$(address_after "$work/relay.log" "admin on" "$spawned_pid")"
step "relay (as idem): ready"
# The template's instance file is a copy of the installed /etc/idem/consume.toml.
run_unit "${units[2]}" "$work/consume.log" /etc/idem/consume.toml --nats "$nats" --stream EVENTS \
  --consumer pkgtest --deliver "http://$service/anything" --admin-listen 127.0.0.1:0
daemon_pid[consume]=$spawned_pid daemon_unit[consume]=${units[2]}
ready "$(address_after "$work/consume.log" "admin on" "$spawned_pid")"
step "consume (as idem): ready"
run_unit "${units[3]}" "$work/sweep.log" "" --store "$db" --admin-listen 127.0.0.1:0
daemon_pid[sweep]=$spawned_pid daemon_unit[sweep]=${units[3]}
ready "$(address_after "$work/sweep.log" "admin on" "$spawned_pid")"
step "sweep (as idem): ready"
# One event through both: enqueued in the outbox, published by the relay, POSTed by the consumer.
"$pg_bin/psql" -qtAX -h 127.0.0.1 -p "$pg_port" -U postgres app -c \
  "SELECT idem.outbox_enqueue(event_id => 'pkg-1.created', subject => 'events.created',
     payload => convert_to('{}', 'UTF8'))" >/dev/null || fail "outbox_enqueue failed"
for _ in $(seq 1000); do
  [[ $(curl -fsS "http://$service/executions?key=pkg-1.created") == 1 ]] && break
  sleep 0.02
done
[[ $(curl -fsS "http://$service/executions?key=pkg-1.created") == 1 ]] ||
  fail "the event enqueued in the outbox never reached the service through the relay and the consumer"
step "an outbox event reached the service through the relay and the consumer"

# SIGTERM drains within the unit's TimeoutStopSec, exit status 0.
for daemon in sweep consume relay gateway; do
  timeout=$(unit_value "${daemon_unit[$daemon]}" TimeoutStopSec)
  stop_pid "${daemon_pid[$daemon]}" "${timeout%s}"
  ((stop_status == 0)) || fail "$daemon exited with status $stop_status on SIGTERM (137: still running after TimeoutStopSec=$timeout)"
done
step "every daemon stopped on SIGTERM within its TimeoutStopSec, status 0"

# --- purge ---------------------------------------------------------------------------------
dpkg --purge idem >"$work/dpkg-purge.log" 2>&1 || fail "dpkg --purge failed"
installed=false
left=()
for path in /usr/bin/idem /etc/idem /var/lib/idem /usr/share/idem /usr/share/doc/idem \
  "${units[@]}"; do
  [[ -e $path ]] && left+=("$path")
done
((${#left[@]} == 0)) || fail "dpkg --purge left ${left[*]}"
getent passwd idem >/dev/null || fail "the user idem was removed (Debian keeps system users)"
step "purged: nothing left but the user idem"
