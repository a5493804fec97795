#!/usr/bin/env bash
# Gateway benchmark: wrk against one trivial upstream (examples/example_service), measured
# directly, through nginx (proxy_pass with a keep-alive pool) and through `idem gateway` on the
# memory and the SQLite store, with a fresh Idempotency-Key per request (the first-execution
# path) and with one repeated key (the replay path). Throughput is printed as a ratio to nginx's
# and p99 as the time added over the direct upstream, both measured in the same run (these
# machines are noisy; ratios drift much less than absolutes).
#
#   bench/gateway-bench.sh              DURATION (10s) per run, two runs per case (~3 minutes)
#   bench/gateway-bench.sh --quick      a 3-second smoke run (also QUICK=1)
#   DURATION=5s CONNECTIONS=64 bench/gateway-bench.sh
#   ROUNDS=3 bench/gateway-bench.sh     every case three times, in turn: the table shows medians
#
# ROUNDS (1) runs the whole sequence of cases that many times, one round after another (system
# calls and allocations in the first round only). Each figure is then the median of its rounds,
# and each ratio ("x nginx", a store against memory) the median of the ratios within a round:
# on a machine whose speed drifts over minutes, a ratio of two cases measured a minute apart
# moves less than either figure does.
#
# BESIDE (1) measures nginx's throughput again beside each gateway case: nginx stays up for
# the whole round, and wrk drives it just before each gateway throughput run and once more
# after the last. A case's "x nginx" is then its req/s over the mean of the two nginx runs on
# either side of it, seconds apart rather than minutes; a slow spell of the machine that lasts
# a case or two then moves the case and its reference together. The table's nginx row stays
# nginx's first run of the round, and a line after the table gives the spread of the runs
# beside (nginx's own drift within the run). BESIDE=0 compares every case with that first
# run, as before, in less time.
#
# STORES (default "passthrough memory sqlite sqlite-full redis postgresql") picks the gateway's
# cases: passthrough is the gateway as a plain proxy (one route with key = "off": no key, no
# store call, no fingerprint; first executions only), which parts the gap to nginx into what the
# proxy itself costs and what the idempotency work adds; the others are stores
# (sqlite is the SQLite store with ?durability=normal, its default; sqlite-full the same with
# ?durability=full, an fsync per commit; SQLITE_OPTIONS, e.g. "replay_cache_entries=0", is
# appended to both URLs' options); for redis and
# postgresql the script starts a server of its own (redis without persistence, PostgreSQL with
# fsync off, as the tests do) on a free port, and the gateway runs
# IDEM_NET_STORE_THREADS (8) store threads, since each call waits a round trip. Each shared
# store's figures are also printed as a ratio to the memory store's.
#
# Two wrk runs per case, each after a 1-second warm-up:
#   throughput  CONNECTIONS (32) connections as fast as they go: req/s (and "p99 loaded", which
#               is mostly queueing)
#   latency     LATENCY_CONNECTIONS (1) connection, one request at a time: p50 and p99 of the
#               path itself rather than of a queue (wrk cannot hold a fixed rate; one connection
#               is the closest it gets to the cost a proxy adds to each request)
# The same two runs go through the byte relay (bench/byte_relay.cc, idem_byte_relay): the least
# any proxy can do, a thread per direction that copies bytes from one socket to the other. The
# time it adds at p50 over the upstream alone is the floor of what a proxy adds on this machine
# (one more recv and send each way, two more thread wake-ups), printed beside the latency aim.
# Each gateway run starts a fresh `idem gateway` (the SQLite file, in the temp dir, starts
# empty); the replay runs prime their key with one request first.
#
# Threads (environment variables): nginx runs NGINX_WORKERS (1) worker process; the gateway
# IDEM_THREADS (1) event-loop thread and IDEM_STORE_THREADS (2, the gateway's default for
# SQLite) store threads (the memory store answers inline on the event loop; the SQLite store's
# claims and completions are queued by the event loop to the store's own writer thread, which
# commits each batch of them, work nginx does not do at all; its store threads serve only the
# other calls, such as the readiness probe). One event loop against one worker keeps the
# comparison fair on a small machine. IDEM_THREADS=default passes no --threads, so the gateway
# picks its default (one event loop per CPU it may run on). PROXY_CPUS (e.g. "0" or "0,1") pins
# nginx and the gateway to those CPUs with taskset; wrk and the upstream stay unpinned. wrk runs
# WRK_THREADS (1) thread; the upstream starts a thread per connection. wrk, the
# proxy and the upstream share this machine's cores, so a proxy that burns more CPU also leaves
# less to the others.
#
# Request logs (REQUEST_LOGS): "gateway" (the default) has the gateway write its line per request
# (to a file in the temp dir, its default) and nginx none, the stricter reference; "none" turns
# both off (the gateway with --request-log off), and "both" has nginx log each request too, to a
# file buffered as the gateway's lines are (buffer=64k flush=100ms): the two like-for-like
# comparisons.
#
# A case fails (exit status 1) if wrk counted socket errors or responses with status >= 400, if
# the upstream did not execute once per first-execution response, if a replay reached the
# upstream, or if the gateway's metrics show any outcome other than executed/replayed.
#
# System calls per request (SYSCALLS=0 skips them; needs perf, installed with apt-get if
# missing): for nginx and for each gateway case, `perf stat -e raw_syscalls:sys_enter` counts
# every system call of the proxy process (all its threads) for SYSCALL_SECONDS (3) while wrk
# drives CONNECTIONS connections, and divides by the requests the proxy answered in that window
# (the upstream's execution count for first executions, the gateway's replayed count for
# replays). SYSCALL_DETAIL=1 also prints each case's busiest system calls over one second
# (perf trace -s). The aim: the gateway's count at most nginx's + 1. In the same window the
# proxy's CPU time per request is read from /proc (user and system, all threads): where the
# system calls match nginx's, the user time is what is left to explain.
#
# The ceiling of a durable first execution (with sqlite-full in STORES; needs python3): a first
# execution at durability=full waits for two fsync'd commits in turn (the claim before the
# upstream runs, the completion before the answer), and with CONNECTIONS requests in flight a
# commit can hold at most CONNECTIONS writes. A bare SQLite database in the same directory
# (WAL, synchronous=FULL, checkpointed outside the timing every 64 commits, so that commits
# rewrite the WAL in place as the store's checkpointer has them do) commits transactions of
# CONNECTIONS inserted rows for SYSCALL_SECONDS. With the mean time of a COMMIT alone (the
# inserts counted as free), no implementation making those two commits reaches more than
# CONNECTIONS / (2 x that time) first executions per second. The script prints that ceiling
# as a ratio to nginx, and the SQLite store's durability=full first executions as a ratio to it.
#
# Heap allocations per request (ALLOCS=0 skips them): for each gateway case, a separate
# gateway runs with a counting shim loaded (LD_PRELOAD of build/release/bench/
# libidem_alloc_count.so, bench/alloc_count.cc: every malloc, calloc, realloc and aligned
# allocation, which operator new reaches, counted atomically) while wrk drives CONNECTIONS
# connections; the count is read (SIGUSR2) at the start and the end of an ALLOC_SECONDS (3)
# window and divided by the requests the gateway answered in it. That gateway's throughput is
# not part of the table. ALLOC_STORES (default: every store in STORES) picks the stores counted.
# The aims: at most 10 per memory-store first execution, at most 5 per memory-store replay.
#
# IDEM_BIN_DIR (build/release) is where `idem` and `example_service` are taken from, so a copy
# of an earlier build can be measured the same way.
#
# Installs wrk, nginx and curl with apt-get if missing; builds the release binaries if absent.
# Every process is started here and stopped by its PID on exit. Not part of the test command.
set -euo pipefail
cd "$(dirname "$0")/.."

quick=${QUICK:-0}
for arg in "$@"; do
  case $arg in
    --quick) quick=1 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench/gateway-bench.sh: unknown argument '$arg' (try --help)" >&2; exit 2 ;;
  esac
done
if [[ $quick == 1 ]]; then DURATION=${DURATION:-3s}; fi
DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-32}
ROUNDS=${ROUNDS:-1}
if [[ ! $ROUNDS =~ ^[1-9][0-9]*$ ]]; then
  echo "gateway-bench: ROUNDS must be a whole number >= 1, not '$ROUNDS'" >&2
  exit 2
fi
LATENCY_CONNECTIONS=${LATENCY_CONNECTIONS:-1}
WRK_THREADS=${WRK_THREADS:-1}
NGINX_WORKERS=${NGINX_WORKERS:-1}
REQUEST_LOGS=${REQUEST_LOGS:-gateway}
case $REQUEST_LOGS in
  gateway | none | both) ;;
  *) echo "gateway-bench: REQUEST_LOGS must be gateway, none or both, not '$REQUEST_LOGS'" >&2
     exit 2 ;;
esac
idem_request_log=()
[[ $REQUEST_LOGS != none ]] || idem_request_log=(--request-log off)
IDEM_THREADS=${IDEM_THREADS:-1}
IDEM_STORE_THREADS=${IDEM_STORE_THREADS:-2}
PROXY_CPUS=${PROXY_CPUS:-}
proxy_pin=()
[[ -z $PROXY_CPUS ]] || proxy_pin=(taskset -c "$PROXY_CPUS")
idem_threads=(--threads "$IDEM_THREADS")
[[ $IDEM_THREADS != default ]] || idem_threads=()
IDEM_NET_STORE_THREADS=${IDEM_NET_STORE_THREADS:-8}
STORES=${STORES:-passthrough memory sqlite sqlite-full redis postgresql}
SYSCALLS=${SYSCALLS:-1}
SYSCALL_SECONDS=${SYSCALL_SECONDS:-3}
SYSCALL_DETAIL=${SYSCALL_DETAIL:-0}
ALLOCS=${ALLOCS:-1}
ALLOC_SECONDS=${ALLOC_SECONDS:-3}
ALLOC_STORES=${ALLOC_STORES:-$STORES}
BESIDE=${BESIDE:-1}
if [[ $BESIDE != 0 && $BESIDE != 1 ]]; then
  echo "gateway-bench: BESIDE must be 0 or 1, not '$BESIDE'" >&2
  exit 2
fi

source bench/lib/install-tools.sh
tools=(wrk nginx curl)  # Debian 12: nginx-light is only a wrapper; nginx may be in /usr/sbin
[[ $SYSCALLS == 0 ]] || tools+=(perf=linux-perf)
install_tools gateway-bench "${tools[@]}"
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
if [[ ! -x build/release/idem || ! -x build/release/example_service ]]; then
  scripts/install-deps.sh
  scripts/build.sh release >/dev/null
fi
bench_targets=(idem_byte_relay)
[[ $ALLOCS == 0 ]] || bench_targets+=(idem_alloc_count)
cmake --build --preset release --target "${bench_targets[@]}" >/dev/null

work=$(mktemp -d)
pids=()
source bench/lib/postgres-server.sh
cleanup() {
  set +e
  stop_postgres
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
# Copies, so that a rebuild during the run cannot mix two versions into one table.
mkdir "$work/bin"
IDEM_BIN_DIR=${IDEM_BIN_DIR:-build/release}
cp "$IDEM_BIN_DIR/idem" "$IDEM_BIN_DIR/example_service" "$work/bin/"
cp build/release/bench/idem_byte_relay "$work/bin/"
[[ $ALLOCS == 0 ]] || cp build/release/bench/libidem_alloc_count.so "$work/bin/"

fail() {
  echo "gateway-bench: $*" >&2
  exit 1
}

stop_pid() {
  local pid=$1 p rest=()
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  for p in "${pids[@]}"; do [[ $p == "$pid" ]] || rest+=("$p"); done
  pids=("${rest[@]}")
}

source bench/lib/address-after.sh

upstream_executions() { curl -sf "http://$service/executions"; }

# The gateway's outcome counters on admin address $1: "executed replayed other". In the
# passthrough case (plain_proxy=1) a passthrough counts as executed.
plain_proxy=0
gateway_outcomes() {
  curl -sf "http://$1/metrics" | awk -v plain="$plain_proxy" '
    /^idem_gateway_requests_total\{/ {
      match($0, /outcome="[a-z_]*"/)
      outcome = substr($0, RSTART + 9, RLENGTH - 10)
      if (outcome == "executed" || (plain && outcome == "passthrough")) e += $NF
      else if (outcome == "replayed") r += $NF
      else x += $NF
    }
    END { printf "%d %d %d\n", e, r, x }'
}

# One wrk run: address, mode (unique|fixed), connections, duration, run id. Prints the RESULT
# line's values: requests duration_us p50_us p99_us connect read write status timeout.
run_wrk() {
  local threads=$WRK_THREADS out line
  ((threads <= $3)) || threads=$3
  out=$(IDEM_BENCH_MODE=$2 IDEM_BENCH_RUN=$5 wrk -t"$threads" -c"$3" -d"$4" \
    -s bench/gateway/wrk.lua "http://$1" 2>&1) || true
  line=$(grep '^RESULT' <<<"$out" | head -1) || true
  if [[ -z $line ]]; then
    echo "gateway-bench: wrk printed no RESULT line:" >&2
    echo "$out" >&2
    return 1
  fi
  awk '{ for (i = 2; i <= NF; i++) { split($i, kv, "="); printf "%s ", kv[2] } print "" }' \
    <<<"$line"
}

runs=0
beside_runs=0  # nginx runs beside the gateway cases so far (BESIDE=1), this round
# One measurement: name, kind (throughput|latency), address, mode, connections, admin address
# of a gateway or "-". Appends "name kind req/s p50_ms p99_ms non2xx socket_errors problem
# round beside" to $work/results, where problem is "-" or a reason with "_" for spaces and
# beside the number of the nginx run beside it (measure_beside; 0 before the first).
measure() {
  local name=$1 kind=$2 address=$3 mode=$4 connections=$5 admin=$6
  local before_exec after_exec before_out=(0 0 0) after_out=(0 0 0) r problem=() slack line
  runs=$((runs + 1))
  run_wrk "$address" "$mode" "$connections" 1s "warm$runs-$RANDOM" >/dev/null
  sleep 0.2  # let requests the warm-up left in flight finish
  before_exec=$(upstream_executions)
  if [[ $admin != - ]]; then
    line=$(gateway_outcomes "$admin")
    read -ra before_out <<<"$line"
  fi
  line=$(run_wrk "$address" "$mode" "$connections" "$DURATION" "run$runs-$RANDOM$RANDOM")
  read -ra r <<<"$line"
  sleep 0.2
  after_exec=$(upstream_executions)
  if [[ $admin != - ]]; then
    line=$(gateway_outcomes "$admin")
    read -ra after_out <<<"$line"
  fi

  local requests=${r[0]} duration_us=${r[1]} socket=$((r[4] + r[5] + r[6] + r[8])) status=${r[7]}
  local executions=$((after_exec - before_exec))
  local executed=$((after_out[0] - before_out[0])) replayed=$((after_out[1] - before_out[1]))
  local other=$((after_out[2] - before_out[2]))
  slack=$((2 * connections + 2))  # requests in flight when wrk stops are executed, not counted
  ((requests > 0)) || problem+=("no_responses")
  ((socket == 0)) || problem+=("${socket}_socket_errors")
  ((status == 0)) || problem+=("${status}_responses_>=400")
  if [[ $mode == fixed ]]; then
    ((executions == 0)) || problem+=("${executions}_replays_reached_the_upstream")
    [[ $admin == - ]] || ((replayed >= requests && executed == 0)) ||
      problem+=("gateway_counted_${replayed}_replayed_${executed}_executed_of_${requests}")
  else
    ((executions >= requests && executions <= requests + slack)) ||
      problem+=("upstream_executed_${executions}_for_${requests}_responses")
    [[ $admin == - ]] || ((executed >= requests && executed <= requests + slack)) ||
      problem+=("gateway_counted_${executed}_executed_for_${requests}_responses")
  fi
  [[ $admin == - ]] || ((other == 0)) || problem+=("gateway_counted_${other}_other_outcomes")

  local summary
  summary=$(awk -v n="$requests" -v d="$duration_us" -v p50="${r[2]}" -v p99="${r[3]}" \
    'BEGIN { printf "%.0f %.3f %.3f", n / (d / 1e6), p50 / 1000, p99 / 1000 }')
  local problems="-"
  if ((${#problem[@]})); then problems=$(IFS=,; echo "${problem[*]}"); fi
  echo "$name $kind $summary $status $socket $problems $round $beside_runs" >>"$work/results"
  local figures
  read -ra figures <<<"$summary"
  printf '  %-23s %-10s %3s conns %9s req/s  p50 %7s ms  p99 %7s ms  upstream executions %s%s\n' \
    "$name" "$kind" "$connections" "${figures[@]}" "$executions" \
    "$([[ $problems == - ]] || echo "  FAILED: ${problems//_/ }")" >&2
}

# With BESIDE=1: one more nginx throughput run, numbered within the round; the gateway
# throughput run after it records that number (measure), so its reference is this run and the
# next one.
measure_beside() {
  beside_runs=$((beside_runs + 1))
  measure nginx-beside throughput "$nginx" unique "$CONNECTIONS" -
}

# The user and system CPU time of process $1 so far, in clock ticks: "user system".
cpu_ticks() { awk '{ print $14, $15 }' "/proc/$1/stat"; }

# System calls per request: name, pid of the proxy process, address, mode, and a command that
# prints the proxy's answered-request count so far. Appends "name calls_per_request requests
# user_us_per_request system_us_per_request" to $work/syscalls.
count_syscalls() {
  local name=$1 pid=$2 address=$3 mode=$4 counter=$5 before after calls wrk_pid try t0 t1
  IDEM_BENCH_MODE=$mode IDEM_BENCH_RUN="sys$RANDOM$RANDOM" wrk -t1 -c"$CONNECTIONS" \
    -d"$((3 * SYSCALL_SECONDS + 10))s" -s bench/gateway/wrk.lua "http://$address" \
    >"$work/wrk-sys.out" 2>&1 &
  wrk_pid=$!
  sleep 1  # connected and running
  # perf stat attached to a running process now and then reports "<not counted>": try again.
  for try in 1 2 3; do
    before=$($counter)
    t0=$(cpu_ticks "$pid")
    calls=$(perf stat -x, -e raw_syscalls:sys_enter -p "$pid" -- sleep "$SYSCALL_SECONDS" 2>&1 |
      awk -F, '/raw_syscalls:sys_enter/ { print $1 }')
    t1=$(cpu_ticks "$pid")
    after=$($counter)
    [[ $calls =~ ^[0-9]+$ ]] && ((after > before)) && break
  done
  if [[ $SYSCALL_DETAIL == 1 ]]; then
    perf trace -s -p "$pid" -- sleep 1 2>&1 | awk -v name="$name" '
      $1 ~ /^[a-z_0-9]+$/ && $2 ~ /^[0-9]+$/ { calls[$1] += $2 }
      END { for (c in calls) printf "  %-23s %-16s %8d calls in 1 s\n", name, c, calls[c] }' |
      sort -k3 -n -r | head -12 >&2
  fi
  kill -TERM "$wrk_pid" 2>/dev/null || true
  wait "$wrk_pid" 2>/dev/null || true
  if [[ ! $calls =~ ^[0-9]+$ ]] || ((after <= before)); then
    echo "  $name: no system call count (perf: '${calls:-nothing}', $((after - before)) requests)" >&2
    return 0
  fi
  awk -v n="$name" -v c="$calls" -v r="$((after - before))" -v t0="$t0" -v t1="$t1" \
    -v tick_us="$((1000000 / $(getconf CLK_TCK)))" '
    BEGIN {
      split(t0, a, " "); split(t1, b, " ")
      printf "%s %.2f %d %.1f %.1f\n", n, c / r, r, (b[1] - a[1]) * tick_us / r,
             (b[2] - a[2]) * tick_us / r
    }' >>"$work/syscalls"
}
# Heap allocations per request: name, store, mode. Starts its own gateway with the counting
# shim, drives it with wrk and appends "name allocations_per_request requests" to $work/allocs.
read_allocations() {  # the shim's count in gateway $1 so far
  local file=$work/allocs-count
  rm -f "$file"
  kill -USR2 "$1"
  for _ in $(seq 1 250); do
    [[ -s $file ]] && { awk '{ print $2 }' "$file"; return 0; }
    sleep 0.02
  done
  echo "gateway-bench: the allocation counter never answered" >&2
  return 1
}
count_allocations() {
  local name=$1 store=$2 mode=$3 wrk_pid a0 a1 r0 r1
  GATEWAY_PRELOAD="$work/bin/libidem_alloc_count.so" start_gateway "$store"
  [[ $mode == fixed ]] && prime "$gateway"
  IDEM_BENCH_MODE=$mode IDEM_BENCH_RUN="alloc$RANDOM$RANDOM" wrk -t1 -c"$CONNECTIONS" \
    -d"$((ALLOC_SECONDS + 10))s" -s bench/gateway/wrk.lua "http://$gateway" \
    >"$work/wrk-alloc.out" 2>&1 &
  wrk_pid=$!
  sleep 1  # connected and running
  r0=$(gateway_answered)
  a0=$(read_allocations "$gateway_pid")
  sleep "$ALLOC_SECONDS"
  a1=$(read_allocations "$gateway_pid")
  r1=$(gateway_answered)
  kill -TERM "$wrk_pid" 2>/dev/null || true
  wait "$wrk_pid" 2>/dev/null || true
  stop_pid "$gateway_pid"
  if [[ -z $a0 || -z $a1 ]] || ((r1 <= r0)); then
    echo "  $name: no allocation count ($((r1 - r0)) requests)" >&2
    return 0
  fi
  awk -v n="$name" -v a="$((a1 - a0))" -v r="$((r1 - r0))" \
    'BEGIN { printf "%s %.1f %d\n", n, a / r, r }' >>"$work/allocs"
}

gateway_answered() { gateway_outcomes "$admin" | awk '{ print $1 + $2 }'; }

# Starts a redis-server without persistence on a free port; sets redis_port.
start_redis() {
  redis_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  mkdir -p "$work/redis"
  redis-server --port "$redis_port" --bind 127.0.0.1 --dir "$work/redis" --save "" \
    --appendonly no --daemonize no >"$work/redis/redis.log" 2>&1 &
  pids+=("$!")
  for _ in $(seq 1 250); do
    grep -q "Ready to accept connections" "$work/redis/redis.log" && return 0
    sleep 0.02
  done
  cat "$work/redis/redis.log" >&2
  fail "redis-server did not start"
}

# Starts `idem gateway` on store $1 (passthrough|memory|sqlite|sqlite-full|redis|postgresql);
# sets gateway_pid, gateway, admin.
gateways=0
start_gateway() {
  local store=memory log store_threads=$IDEM_STORE_THREADS config=()
  gateways=$((gateways + 1))
  if [[ $1 == passthrough ]]; then
    printf '[[route]]\npath_prefix = "/"\nkey = "off"\n' >"$work/passthrough.toml"
    config=(--config "$work/passthrough.toml")
  fi
  [[ $1 == sqlite ]] && store="sqlite:$work/idem-$gateways.db?durability=normal"
  [[ $1 == sqlite-full ]] && store="sqlite:$work/idem-$gateways.db?durability=full"
  [[ $1 == sqlite* && -n ${SQLITE_OPTIONS:-} ]] && store+="&$SQLITE_OPTIONS"
  if [[ $1 == redis ]]; then
    store="redis://127.0.0.1:$redis_port?prefix=bench$gateways"
    store_threads=$IDEM_NET_STORE_THREADS
  elif [[ $1 == postgresql ]]; then
    store="postgresql://postgres@127.0.0.1:$pg_port/bench?pool_size=$IDEM_NET_STORE_THREADS&schema=bench$gateways"
    store_threads=$IDEM_NET_STORE_THREADS
  fi
  log="$work/gateway-$gateways.log"
  LD_PRELOAD=${GATEWAY_PRELOAD:-} IDEM_ALLOC_COUNT_FILE="$work/allocs-count" \
    "${proxy_pin[@]}" "$work/bin/idem" gateway "${config[@]}" --listen 127.0.0.1:0 \
    --admin-listen 127.0.0.1:0 --upstream "http://$service" --store "$store" \
    "${idem_threads[@]}" "${idem_request_log[@]}" --store-threads "$store_threads" >"$log" 2>&1 &
  gateway_pid=$!
  pids+=("$gateway_pid")
  gateway=$(address_after "$log" "gateway on" "$gateway_pid")
  admin=$(address_after "$log" "admin on" "$gateway_pid")
}

# Stores the replay key's response through gateway $1 and checks that a retry is a replay.
prime() {
  local request=(-s -X POST "http://$1/v1/payments" -H "Idempotency-Key: bench-replay"
    -H "Content-Type: application/json" -H "Authorization: Bearer bench-tenant"
    --data-binary '{"amount":1000,"currency":"EUR"}')
  local status
  status=$(curl "${request[@]}" -o /dev/null -w '%{http_code}')
  [[ $status == 201 ]] || fail "priming the replay key: status $status, not 201"
  curl "${request[@]}" -o /dev/null -D - | grep -qi '^Idempotent-Replayed: *true' ||
    fail "priming the replay key: the retry was not answered as a replay"
}

# Starts nginx in front of the upstream on a free port; sets nginx_pid, nginx.
start_nginx() {
  local dir=$work/nginx port access_log=off
  mkdir -p "$dir"
  [[ $REQUEST_LOGS == both ]] && access_log="$dir/access.log combined buffer=64k flush=100ms"
  for _ in 1 2 3 4 5; do
    port=$((20000 + RANDOM % 40000))
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then continue; fi  # taken
    sed -e "s|@DIR@|$dir|g" -e "s|@USER@|$(id -un) $(id -gn)|" \
      -e "s|@WORKERS@|$NGINX_WORKERS|" -e "s|@ACCESS_LOG@|$access_log|" \
      -e "s|@LISTEN@|127.0.0.1:$port|" -e "s|@UPSTREAM@|$service|" \
      bench/gateway/nginx.conf.in >"$dir/nginx.conf"
    "${proxy_pin[@]}" "$NGINX" -c "$dir/nginx.conf" -p "$dir" -e "$dir/nginx-error.log" >"$dir/nginx.out" 2>&1 &
    nginx_pid=$!
    pids+=("$nginx_pid")
    for _ in $(seq 1 250); do
      if curl -s -o /dev/null "http://127.0.0.1:$port/"; then
        nginx=127.0.0.1:$port
        return 0
      fi
      kill -0 "$nginx_pid" 2>/dev/null || break
      sleep 0.02
    done
    stop_pid "$nginx_pid"
  done
  cat "$dir/nginx.out" "$dir/nginx-error.log" >&2 2>/dev/null || true
  fail "nginx did not start"
}

echo "gateway-bench: $(nproc) cores, shared by wrk, the proxy and the upstream;" \
  "$DURATION per run after a 1 s warm-up; $CONNECTIONS connections for throughput," \
  "$LATENCY_CONNECTIONS for latency; wrk $WRK_THREADS thread(s), nginx $NGINX_WORKERS" \
  "worker(s), idem $IDEM_THREADS event-loop + $IDEM_STORE_THREADS store thread(s);" \
  "request logs: $REQUEST_LOGS${PROXY_CPUS:+;\
 proxies pinned to CPU(s) $PROXY_CPUS}" >&2

"$work/bin/example_service" 127.0.0.1:0 >"$work/service.log" 2>&1 &
service_pid=$!
pids+=("$service_pid")
service=$(address_after "$work/service.log" "listening on" "$service_pid")

[[ " $STORES " == *" redis "* ]] && start_redis
if [[ " $STORES " == *" postgresql "* ]]; then
  chmod 711 "$work"  # the server runs as the postgres user when this script runs as root
  start_postgres "$work/pg"
fi
for round in $(seq 1 "$ROUNDS"); do
  ((ROUNDS == 1)) || echo "round $round of $ROUNDS" >&2
  measure direct throughput "$service" unique "$CONNECTIONS" -
  measure direct latency "$service" unique "$LATENCY_CONNECTIONS" -

  start_nginx
  beside_runs=0
  measure nginx throughput "$nginx" unique "$CONNECTIONS" -
  measure nginx latency "$nginx" unique "$LATENCY_CONNECTIONS" -
  if [[ $SYSCALLS != 0 && $round == 1 ]]; then
    nginx_worker=$(pgrep -P "$nginx_pid" | head -1)
    count_syscalls nginx "$nginx_worker" "$nginx" unique upstream_executions
  fi
  [[ $BESIDE == 1 ]] || stop_pid "$nginx_pid"

  "${proxy_pin[@]}" "$work/bin/idem_byte_relay" "$service" >"$work/relay.log" 2>&1 &
  relay_pid=$!
  pids+=("$relay_pid")
  relay=$(address_after "$work/relay.log" "relay on" "$relay_pid")
  measure byte-relay throughput "$relay" unique "$CONNECTIONS" -
  measure byte-relay latency "$relay" unique "$LATENCY_CONNECTIONS" -
  stop_pid "$relay_pid"

  for store in $STORES; do
    modes=(unique fixed)
    plain_proxy=0
    if [[ $store == passthrough ]]; then modes=(unique); plain_proxy=1; fi
    for mode in "${modes[@]}"; do
      name="idem-$store-$([[ $mode == unique ]] && echo first || echo replay)"
      [[ $store == passthrough ]] && name=idem-passthrough
      for kind in throughput latency; do
        start_gateway "$store"
        [[ $mode == fixed ]] && prime "$gateway"
        connections=$CONNECTIONS
        [[ $kind == latency ]] && connections=$LATENCY_CONNECTIONS
        [[ $BESIDE == 1 && $kind == throughput ]] && measure_beside
        measure "$name" "$kind" "$gateway" "$mode" "$connections" "$admin"
        if [[ $kind == throughput && $SYSCALLS != 0 && $round == 1 ]]; then
          count_syscalls "$name" "$gateway_pid" "$gateway" "$mode" gateway_answered
        fi
        stop_pid "$gateway_pid"
      done
      if [[ $ALLOCS != 0 && $round == 1 && " $ALLOC_STORES " == *" $store "* ]]; then
        count_allocations "$name" "$store" "$mode"
      fi
    done
  done
  if [[ $BESIDE == 1 ]]; then
    measure_beside
    stop_pid "$nginx_pid"
  fi
done
plain_proxy=0

# The ceiling of a first execution making two fsync'd commits in turn (see the top): prints
# first executions per second.
fsync_ceiling() {
  python3 - "$work/ceiling.db" "$CONNECTIONS" "$SYSCALL_SECONDS" <<'PY'
import os, sqlite3, sys, time
path, rows, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
db = sqlite3.connect(path, isolation_level=None)
db.execute("PRAGMA journal_mode=WAL")
db.execute("PRAGMA synchronous=FULL")
db.execute("PRAGMA wal_autocheckpoint=0")
db.execute("CREATE TABLE records (key TEXT PRIMARY KEY, fingerprint BLOB, state INT, token INT,"
           " expires_at INT, response BLOB)")
fingerprint, response = os.urandom(32), os.urandom(200)
n, commits, committing = 0, 0, 0.0
started = time.monotonic()
while time.monotonic() - started < seconds:
    db.execute("BEGIN IMMEDIATE")
    for _ in range(rows):
        n += 1
        db.execute("INSERT INTO records VALUES (?, ?, 1, ?, 0, ?)",
                   ("tenant/v1/payments/bench-%d" % n, fingerprint, n, response))
    t = time.monotonic()
    db.execute("COMMIT")
    committing += time.monotonic() - t
    commits += 1
    if commits % 64 == 0:  # untimed: the WAL is then rewritten in place, not grown
        db.execute("PRAGMA wal_checkpoint(RESTART)")
print("%.0f" % (rows / (2 * committing / commits)))
PY
}
ceiling=0
if [[ " $STORES " == *" sqlite-full "* ]]; then
  if command -v python3 >/dev/null; then
    ceiling=$(fsync_ceiling)
  else
    echo "gateway-bench: no python3, so no ceiling for durability=full" >&2
  fi
fi

echo
if [[ -s $work/syscalls ]]; then
  awk '{ calls[$1] = $2; n[$1] = $3; user[$1] = $4; sys[$1] = $5; order[++k] = $1 }
    END {
      print "system calls per request (perf stat over " n[order[1]] "+ requests):"
      for (i = 1; i <= k; i++) {
        c = order[i]
        printf "  %-23s %6.2f", c, calls[c]
        if (c != "nginx" && ("nginx" in calls)) printf "   %+.2f over nginx", calls[c] - calls["nginx"]
        print ""
      }
      print ""
      print "proxy CPU per request, same window (us; user + system = total):"
      for (i = 1; i <= k; i++) {
        c = order[i]
        printf "  %-23s %6.1f + %6.1f = %6.1f", c, user[c], sys[c], user[c] + sys[c]
        if (c != "nginx" && ("nginx" in calls) && user["nginx"] + sys["nginx"] > 0) {
          printf "   %.2fx nginx (user %.2fx, system %.2fx)",
                 (user[c] + sys[c]) / (user["nginx"] + sys["nginx"]),
                 (user["nginx"] > 0 ? user[c] / user["nginx"] : 0),
                 (sys["nginx"] > 0 ? sys[c] / sys["nginx"] : 0)
        }
        print ""
      }
    }' "$work/syscalls"
  echo
fi
if [[ -s $work/allocs ]]; then
  echo "heap allocations per request (counting shim, over ${ALLOC_SECONDS} s of wrk with" \
    "$CONNECTIONS connections):"
  awk '{ aim = $1 == "idem-memory-first" ? 10 : $1 == "idem-memory-replay" ? 5 : 0
         printf "  %-23s %6.1f   (%d requests)", $1, $2, $3
         if (aim) printf "   aim <= %d: %s", aim, $2 <= aim ? "met" : "missed"
         print "" }' "$work/allocs"
  echo
fi
awk -v conns="$CONNECTIONS" -v latency_conns="$LATENCY_CONNECTIONS" -v ceiling="$ceiling" \
  -v rounds="$ROUNDS" '
  $1 == "nginx-beside" {
    beside[$9, $10] = $3; beside_all[++beside_n] = $3
    if ($8 != "-") { gsub(/_/, " ", $8); problems[$1] = problems[$1] " " $2 ": " $8 ";" }
    next }
  { key = $1 " " $2; k = ++runs_of[key]
    rps_of[key, k] = $3; p50_of[key, k] = $4; p99_of[key, k] = $5; round_rps[key, $9] = $3
    if ($10 > 0) beside_of[key, $9] = $10
    non2xx[$1] += $6; sock[$1] += $7
    if ($8 != "-") { gsub(/_/, " ", $8); problems[$1] = problems[$1] " " $2 ": " $8 ";" }
    if (!($1 in seen)) { seen[$1] = 1; order[++n] = $1 } }
  END {
    # With ROUNDS > 1: each figure is the median of its rounds, and each ratio the median of
    # the ratios within a round (the two cases measured minutes apart, not the whole run).
    for (key in runs_of) {
      rps[key] = median(rps_of, key, runs_of[key])
      p50[key] = median(p50_of, key, runs_of[key])
      p99[key] = median(p99_of, key, runs_of[key])
    }
    nginx_rps = rps["nginx throughput"]; direct_p99 = p99["direct latency"]
    direct_p50 = p50["direct latency"]
    printf "%-23s %9s %7s %7s %8s %12s %12s %11s %8s %8s\n", "case", "req/s", "p50 ms",
      "p99 ms", "x nginx", "p50 +ms over", "p99 +ms over", "p99 loaded", "non-2xx", "socket"
    printf "%-23s %9s %7s %7s %8s %12s %12s %11s %8s %8s\n", "", "", "", "", "req/s", "direct",
      "direct", "ms", "(>=400)", "errors"
    for (i = 1; i <= n; i++) {
      c = order[i]
      added50 = c == "direct" ? "-" : sprintf("%+.3f", p50[c " latency"] - direct_p50)
      added = c == "direct" ? "-" : sprintf("%+.3f", p99[c " latency"] - direct_p99)
      printf "%-23s %9.0f %7.3f %7.3f %8.2f %12s %12s %11.3f %8d %8d%s\n", c,
        rps[c " throughput"], p50[c " latency"], p99[c " latency"], ratio(c, "nginx"),
        added50, added, p99[c " throughput"], non2xx[c], sock[c], (c in problems) ? "  FAILED" : ""
    }
    print ""
    print "req/s: " conns " connections; p50/p99: " latency_conns " connection(s), one request at" \
      " a time; p99 loaded: the req/s run; x nginx: req/s as a ratio to nginx" \
      (beside_n ? " measured beside the case (the mean of its runs just before and after)" : "") \
      (rounds > 1 ? "; medians of " rounds " rounds" : "")
    if (beside_n) {
      lo = hi = beside_all[1]
      for (i = 2; i <= beside_n; i++) {
        if (beside_all[i] < lo) lo = beside_all[i]
        if (beside_all[i] > hi) hi = beside_all[i]
      }
      printf "nginx beside the cases: %d runs, %.0f to %.0f req/s (%.2fx of its own best: the" \
        " drift of this machine within the run)\n", beside_n, lo, hi, lo / hi
    }
    split("idem-passthrough idem-memory-first idem-sqlite-first idem-sqlite-full-first", fc, " ")
    for (i = 1; i <= 4; i++) {
      if (!(fc[i] in seen) || rounds == 1) continue
      line = first = ""
      for (r = 1; r <= rounds; r++) {
        v = round_ratio(fc[i], "nginx", r)
        line = line (v > 0 ? sprintf(" %.3f", v) : " -")
        v = round_ratio(fc[i], "nginx-first", r)
        first = first (v > 0 ? sprintf(" %.3f", v) : " -")
      }
      printf "%s x nginx by round:%s%s\n", fc[i], line,
        beside_n ? " (against the first nginx run of the round:" first ")" : ""
    }
    print ""
    print "shared stores against the memory store:"
    for (i = 1; i <= n; i++) {
      c = order[i]
      if (c !~ /^idem-/ || c ~ /^idem-memory-/ || c == "idem-passthrough") continue
      base = c ~ /-first$/ ? "idem-memory-first" : "idem-memory-replay"
      if (base in seen)
        printf "%-23s req/s %.2fx %s\n", c, ratio(c, base), base
    }
    print ""
    print "aims:"
    aim("idem-memory-first", "req/s >= 0.9x nginx", ratio("idem-memory-first", "nginx"), 0.9, "x")
    if (("idem-passthrough" in seen) && ("idem-memory-first" in seen)) {
      printf "          (the gateway as a plain proxy, idem-passthrough: %.2fx nginx;" \
        " idem-memory-first at %.2fx of it)\n", ratio("idem-passthrough", "nginx"),
        ratio("idem-memory-first", "idem-passthrough")
    }
    aim("idem-sqlite-first", "req/s >= 0.4x nginx", ratio("idem-sqlite-first", "nginx"), 0.4, "x")
    aim("idem-memory-replay", "req/s >= 2x nginx", ratio("idem-memory-replay", "nginx"), 2, "x")
    aim("idem-sqlite-replay", "req/s >= 1.5x nginx", ratio("idem-sqlite-replay", "nginx"), 1.5, "x")
    aim("idem-sqlite-full-first", "req/s >= 0.4x nginx", ratio("idem-sqlite-full-first", "nginx"), 0.4, "x")
    aim("idem-sqlite-full-replay", "req/s >= 1.5x nginx", ratio("idem-sqlite-full-replay", "nginx"), 1.5, "x")
    if (ceiling > 0 && ("idem-sqlite-full-first" in seen)) {
      printf "          (the ceiling of two fsync'"'"'d commits per request: %d req/s, %.2fx nginx;" \
        " idem-sqlite-full-first at %.2fx of it)\n", ceiling, ceiling / nginx_rps,
        rps["idem-sqlite-full-first throughput"] / ceiling
    }
    relay50 = p50["byte-relay latency"] - direct_p50
    aim("idem-memory-first", "p50 added over direct <= 40 us",
      (p50["idem-memory-first latency"] - direct_p50) * 1000, 40, " us", 1)
    if ("byte-relay" in seen && relay50 > 0) {
      printf "          (the floor of any proxy, the byte relay: %+.0f us; nginx %+.0f us;" \
        " idem-memory-first at %.2fx the floor)\n", relay50 * 1000,
        (p50["nginx latency"] - direct_p50) * 1000,
        (p50["idem-memory-first latency"] - direct_p50) / relay50
    }
    split("idem-memory-first idem-sqlite-first idem-memory-replay idem-sqlite-replay", g, " ")
    for (i = 1; i <= 4; i++)
      aim(g[i], "p99 added over direct <= 1 ms", p99[g[i] " latency"] - direct_p99, 1, " ms", 1)
    failed = 0
    for (c in problems) { if (!failed) print "\nfailed cases (their figures are suspect):"
      failed = 1; print "  " c ":" problems[c] }
    exit failed
  }
  # The median of list[key, 1..n].
  function median(list, key, n,    i, j, v, sorted) {
    for (i = 1; i <= n; i++) {
      v = list[key, i]
      for (j = i - 1; j >= 1 && sorted[j] > v; j--) sorted[j + 1] = sorted[j]
      sorted[j + 1] = v
    }
    return n % 2 ? sorted[(n + 1) / 2] : (sorted[n / 2] + sorted[n / 2 + 1]) / 2
  }
  # The throughput of case a over that of case b: the median over the rounds that measured both.
  function ratio(a, b,    r, n, v, ratios) {
    n = 0
    for (r = 1; r <= rounds; r++) {
      v = round_ratio(a, b, r)
      if (v > 0) ratios["", ++n] = v
    }
    return n ? median(ratios, "", n) : 0
  }
  # The throughput of case a over that of case b in round r, 0 if either is missing. Against
  # nginx, with nginx runs beside a (BESIDE=1), the reference is the mean of the runs just
  # before and after a; b = "nginx-first" is the first nginx run of the round all the same.
  function round_ratio(a, b, r,    s, ref) {
    if (!((a " throughput", r) in round_rps)) return 0
    if (b == "nginx-first") {
      b = "nginx"
    } else if (b == "nginx" && ((a " throughput", r) in beside_of)) {
      s = beside_of[a " throughput", r]
      ref = ((r, s + 1) in beside) ? (beside[r, s] + beside[r, s + 1]) / 2 : beside[r, s]
      return ref > 0 ? round_rps[a " throughput", r] / ref : 0
    }
    if (!((b " throughput", r) in round_rps) || round_rps[b " throughput", r] <= 0) return 0
    return round_rps[a " throughput", r] / round_rps[b " throughput", r]
  }
  function aim(c, what, value, bound, unit, at_most) {
    if (!(c in seen)) return
    ok = at_most ? value <= bound : value >= bound
    printf "  %-6s  %-23s %-30s %s\n", ok ? "met" : "missed", c, what,
      sprintf(!at_most ? "%.3f" : unit == " us" ? "%+.0f" : "%+.3f", value) unit
  }' "$work/results"
