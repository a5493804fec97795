#!/usr/bin/env bash
# Instructions per request in `idem gateway`, counted by valgrind's callgrind: the gateway's own
# work in user space (its code, Asio, Beast, libc, OpenSSL), without the kernel's. Unlike a
# rate or a CPU time, the count barely moves between runs (within about 0.3% here), so it tells
# whether a change to the hot path did less work long before gateway-bench's ratios, which
# drift by several percent from one run to the next, can. It says nothing about system calls,
# cache misses or waits: gateway-bench.sh remains the measure of the aims.
#
#   bench/gateway-instructions.sh                  three cases, build/release
#   IDEM_BIN_DIR_B=/tmp/old bench/gateway-instructions.sh
#                                                  the same cases on a second build, in turn,
#                                                  and each count as a ratio to the first's
#
# Cases (CASES, default "passthrough first replay"): passthrough is a route with key = "off"
# (the gateway as a plain proxy), first a fresh Idempotency-Key per request on the memory store
# (a first execution), replay one key repeated (answered from the store). For each, the
# gateway runs under callgrind in front of examples/example_service, wrk drives it with
# CONNECTIONS (4) connections for WARMUP (3 s), the counters are zeroed (callgrind_control
# -z), wrk runs COUNT_SECONDS (10) more, and the count is dumped and divided by the requests
# the gateway answered in that window (its metrics). Under valgrind the gateway runs some 50
# times slower, so a case takes about COUNT_SECONDS + WARMUP + 5 s.
#
# Valgrind does not pass the CPU's SHA extensions through, so OpenSSL's SHA-256 runs its
# portable code there: the fingerprint and the digests weigh several times what they do on the
# CPU (perf: about 1% of a first execution's time). Compare counts with each other, not with
# profiles.
#
# Installs valgrind and wrk with apt-get if missing; builds the release binaries if absent.
# Every process is started here and stopped by its PID on exit. Not part of the test command.
set -euo pipefail
cd "$(dirname "$0")/.."

for arg in "$@"; do
  case $arg in
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench/gateway-instructions.sh: unknown argument '$arg' (try --help)" >&2; exit 2 ;;
  esac
done
CASES=${CASES:-passthrough first replay}
CONNECTIONS=${CONNECTIONS:-4}
WARMUP=${WARMUP:-3}
COUNT_SECONDS=${COUNT_SECONDS:-10}
IDEM_BIN_DIR=${IDEM_BIN_DIR:-build/release}
IDEM_BIN_DIR_B=${IDEM_BIN_DIR_B:-}

source bench/lib/install-tools.sh
install_tools gateway-instructions valgrind wrk curl
if [[ ! -x $IDEM_BIN_DIR/idem || ! -x $IDEM_BIN_DIR/example_service ]]; then
  scripts/install-deps.sh
  scripts/build.sh release >/dev/null
fi
[[ -z $IDEM_BIN_DIR_B || -x $IDEM_BIN_DIR_B/idem ]] ||
  { echo "gateway-instructions: no idem in IDEM_BIN_DIR_B=$IDEM_BIN_DIR_B" >&2; exit 2; }

work=$(mktemp -d)
pids=()
cleanup() {
  set +e
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
source bench/lib/address-after.sh

"$IDEM_BIN_DIR/example_service" 127.0.0.1:0 >"$work/service.log" 2>&1 &
pids+=("$!")
service=$(address_after "$work/service.log" "listening on" "$!")
printf '[[route]]\npath_prefix = "/"\nkey = "off"\n' >"$work/passthrough.toml"

# Requests gateway admin address $1 has answered (executed, replayed or passed through).
answered() {
  curl -sf "http://$1/metrics" | awk '
    /^idem_gateway_requests_total\{/ && /outcome="(executed|replayed|passthrough)"/ { n += $NF }
    END { printf "%d\n", n }'
}

# Instructions per request of build $1 in case $2: writes "instructions requests" to
# $work/result.
count() {
  local bin=$1 case=$2 config=() mode=unique log out pid gateway admin r0 r1 total
  [[ $case == passthrough ]] && config=(--config "$work/passthrough.toml")
  [[ $case == replay ]] && mode=fixed
  log=$work/gateway-$case.log
  out=$work/callgrind-$case.out
  rm -f "$out"*
  valgrind --tool=callgrind --callgrind-out-file="$out" --dump-instr=no \
    "$bin/idem" gateway "${config[@]}" --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 \
    --upstream "http://$service" --store memory --threads 1 >"$log" 2>&1 &
  pid=$!
  pids+=("$pid")
  gateway=$(address_after "$log" "gateway on" "$pid")
  admin=$(address_after "$log" "admin on" "$pid")
  if [[ $case == replay ]]; then  # the key wrk.lua repeats, stored before the first count
    curl -sf -o /dev/null -X POST "http://$gateway/v1/payments" -H "Idempotency-Key: bench-replay" \
      -H "Content-Type: application/json" -H "Authorization: Bearer bench-tenant" \
      --data-binary '{"amount":1000,"currency":"EUR"}'
  fi
  IDEM_BENCH_MODE=$mode IDEM_BENCH_RUN="i$RANDOM" wrk -t1 -c"$CONNECTIONS" -d"${WARMUP}s" \
    -s bench/gateway/wrk.lua "http://$gateway" >/dev/null 2>&1
  callgrind_control -z "$pid" >/dev/null 2>&1
  r0=$(answered "$admin")
  IDEM_BENCH_MODE=$mode IDEM_BENCH_RUN="c$RANDOM" wrk -t1 -c"$CONNECTIONS" -d"${COUNT_SECONDS}s" \
    -s bench/gateway/wrk.lua "http://$gateway" >/dev/null 2>&1
  r1=$(answered "$admin")
  callgrind_control -d "$pid" >/dev/null 2>&1
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  # The dump made on request is the file with a part number; the one written at exit holds
  # only what ran after it.
  total=$(callgrind_annotate "$(ls "$out".* | head -1)" 2>/dev/null |
    awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }')
  if [[ -z $total ]] || ((r1 <= r0)); then
    echo "gateway-instructions: no count for $case ($((r1 - r0)) requests); the log:" >&2
    cat "$log" >&2
    exit 1
  fi
  awk -v t="$total" -v n="$((r1 - r0))" 'BEGIN { printf "%.0f %d\n", t / n, n }' >"$work/result"
}

echo "gateway-instructions: user-space instructions per request (callgrind), memory store," \
  "$CONNECTIONS connections, ${COUNT_SECONDS} s counted after ${WARMUP} s" >&2
printf '%-12s %14s %10s' case "instr/request" requests
[[ -z $IDEM_BIN_DIR_B ]] || printf ' %16s %10s %8s' "B instr/request" requests "B / A"
echo
for case in $CASES; do
  case $case in passthrough | first | replay) ;; *)
    echo "gateway-instructions: unknown case '$case' (passthrough, first, replay)" >&2; exit 2 ;;
  esac
  count "$IDEM_BIN_DIR" "$case"
  read -r a an <"$work/result"
  printf '%-12s %14s %10s' "$case" "$a" "$an"
  if [[ -n $IDEM_BIN_DIR_B ]]; then
    count "$IDEM_BIN_DIR_B" "$case"
    read -r b bn <"$work/result"
    printf ' %16s %10s %8s' "$b" "$bn" "$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", b / a }')"
  fi
  echo
done
