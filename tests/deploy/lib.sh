# Sourced by the deploy tests (metrics_exist_test.sh, package_test.sh): a work directory removed
# on exit, processes stopped by PID, and throwaway PostgreSQL and nats-server on free loopback
# ports (bench/lib/postgres-server.sh), so parallel runs never share a server or a port.
#
#   deploy_setup NAME SOURCE_DIR   sets work (a fresh temp dir, mode 711) and the exit trap
#   spawn NAME LOG COMMAND...      starts COMMAND in the background; sets spawned_pid
#   address_after LOG MARKER PID   waits for "MARKER HOST:PORT" in LOG; prints HOST:PORT
#                                  (bench/lib/address-after.sh)
#   start_postgres_and_nats        sets db (postgresql://...) and nats (nats://...)
#   stop_pid PID [SECONDS]         SIGTERM, waits (default 15 s), then SIGKILL; sets stop_status
#   fail MESSAGE                   prints the logs and exits 1

pids=()
deploy_setup() {
  test_name=$1
  source_dir=$2
  work=$(mktemp -d -t "idem-$1.XXXXXX")
  chmod 711 "$work"
  # shellcheck source=../../bench/lib/postgres-server.sh
  source "$source_dir/bench/lib/postgres-server.sh"
  # shellcheck source=../../bench/lib/address-after.sh
  source "$source_dir/bench/lib/address-after.sh"
  trap deploy_cleanup EXIT
}

stop_status=0
stop_pid() {
  local pid=$1 seconds=${2:-15}
  stop_status=0
  kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || stop_status=$?; return 0; }
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq $((seconds * 10))); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    kill -KILL "$pid" 2>/dev/null || true
    stop_status=137
    wait "$pid" 2>/dev/null || true
    return 0
  fi
  wait "$pid" 2>/dev/null || stop_status=$?
}

deploy_cleanup() {
  local status=$?
  set +e
  local i
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do stop_pid "${pids[i]}" 5; done
  stop_postgres
  if ((status != 0)); then
    shopt -s nullglob
    for log in "$work"/*.log; do
      echo "--- $(basename "$log") (last 20 lines)" >&2
      tail -n 20 "$log" >&2
    done
  fi
  [[ -n ${deploy_extra_cleanup:-} ]] && $deploy_extra_cleanup
  rm -rf "$work"
  exit "$status"
}

fail() {
  echo "$test_name: $*" >&2
  exit 1
}

spawn() {
  local log=$2
  shift 2
  "$@" >"$log" 2>&1 &
  spawned_pid=$!
  pids+=("$spawned_pid")
}

start_postgres_and_nats() {
  start_postgres "$work/pg" app >/dev/null
  db="postgresql://postgres@127.0.0.1:$pg_port/app"
  spawn nats "$work/nats.log" nats-server -js -a 127.0.0.1 -p -1 -m -1 \
    --ports_file_dir "$work" -sd "$work/nats"
  local nats_pid=$spawned_pid
  for _ in $(seq 500); do
    grep -qs monitoring "$work"/*.ports && break
    kill -0 "$nats_pid" 2>/dev/null || fail "nats-server exited"
    sleep 0.02
  done
  nats=$(grep -oh 'nats://[0-9.]*:[0-9]*' "$work"/*.ports | head -1)
  [[ -n $nats ]] || fail "nats-server did not start"
}
