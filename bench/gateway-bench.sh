#!/usr/bin/env bash
# Gateway benchmark: wrk against one trivial upstream (examples/example_service), measured
# directly, through nginx (proxy_pass with a keep-alive pool) and through `idem gateway` on the
# memory and the SQLite store, with a fresh Idempotency-Key per request (the first-execution
# path) and with one repeated key (the replay path). Every figure is printed next to nginx's,
# measured in the same run (these machines are noisy; ratios drift much less than absolutes).
#
#   bench/gateway-bench.sh                 10 s per throughput run (~3 minutes in all)
#   DURATION=3s bench/gateway-bench.sh     a quick look
#
# Two kinds of run per case:
#   throughput  CONNECTIONS (32) connections, as fast as they go: req/s
#   latency     LATENCY_CONNECTIONS (1) connection, one request at a time: p50 and p99 of the
#               path itself, not of a queue (wrk cannot hold a fixed rate; one connection is
#               the closest it gets to measuring the cost a proxy adds to each request)
# Threads: nginx runs NGINX_WORKERS (1) worker; the gateway IDEM_THREADS (1) event-loop thread
# and IDEM_STORE_THREADS (1) store thread; wrk WRK_THREADS (1). wrk, the proxy and the upstream
# share this machine's cores, so a faster proxy also leaves less CPU to the others. The
# gateway writes its one log line per request to a file; nginx's access log is off.
# Not part of the test command.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-32}
LATENCY_CONNECTIONS=${LATENCY_CONNECTIONS:-1}
WRK_THREADS=${WRK_THREADS:-1}
NGINX_WORKERS=${NGINX_WORKERS:-1}
IDEM_THREADS=${IDEM_THREADS:-1}
IDEM_STORE_THREADS=${IDEM_STORE_THREADS:-1}

scripts/install-deps.sh
need=()
for p in wrk nginx-light; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if ((${#need[@]})) && ! command -v nginx >/dev/null; then
  sudo_cmd=()
  [[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
scripts/build.sh release >/dev/null

work=$(mktemp -d)
pids=()
cleanup() {
  set +e
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT

# Waits for "$marker HOST:PORT" in log $1; prints HOST:PORT.
address_after() {
  local log=$1 marker=$2
  for _ in $(seq 1 500); do
    if grep -q "$marker" "$log" 2>/dev/null; then
      grep -o "$marker [0-9.]*:[0-9]*" "$log" | head -1 | awk '{print $NF}'
      return 0
    fi
    sleep 0.02
  done
  echo "gateway-bench: '$marker' never appeared in $log:" >&2
  cat "$log" >&2
  return 1
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

stop_pid() {
  kill -TERM "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}

# wrk against $1 (HOST:PORT) in mode $2 (unique|fixed) with $3 connections for DURATION after a
# 1-second warm-up; prints "requests_per_s p50_ms p99_ms errors".
measure() {
  local address=$1 mode=$2 connections=$3 out
  IDEM_BENCH_MODE=$mode IDEM_BENCH_RUN="warm$RANDOM" wrk -t"$WRK_THREADS" -c"$connections" -d1s \
    -s bench/gateway/wrk.lua "http://$address" >/dev/null 2>&1 || true
  out=$(IDEM_BENCH_MODE=$mode IDEM_BENCH_RUN="run$RANDOM$RANDOM" wrk -t"$WRK_THREADS" \
    -c"$connections" -d"$DURATION" -s bench/gateway/wrk.lua "http://$address" 2>&1)
  echo "$out" | awk '/^RESULT/ {
    for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
    errors = v["connect"] + v["read"] + v["write"] + v["status"] + v["timeout"]
    printf "%.0f %.3f %.3f %d\n", v["requests"] / (v["duration_us"] / 1e6), v["p50_us"] / 1000, v["p99_us"] / 1000, errors
  }'
}

results=()
record() {  # name, throughput line, latency line
  local tput lat
  tput=($2)
  lat=($3)
  results+=("$1 ${tput[0]} ${lat[1]} ${lat[2]} $((tput[3] + lat[3]))")
  printf '  %-22s %9s req/s   p50 %7s ms   p99 %7s ms   errors %s\n' "$1" "${tput[0]}" "${lat[1]}" "${lat[2]}" "$((tput[3] + lat[3]))" >&2
}

bench_both() {  # name address mode
  local t l
  t=$(measure "$2" "$3" "$CONNECTIONS")
  l=$(measure "$2" "$3" "$LATENCY_CONNECTIONS")
  record "$1" "$t" "$l"
}

echo "gateway-bench: $(nproc) cores shared by wrk, the proxy and the upstream; $DURATION per run" >&2

build/release/example_service 127.0.0.1:0 >"$work/service.log" 2>&1 &
pids+=($!)
service=$(address_after "$work/service.log" "listening on")

bench_both direct "$service" unique

nginx_port=$(free_port)
mkdir -p "$work/nginx"
sed -e "s|@DIR@|$work/nginx|g" -e "s|@WORKERS@|$NGINX_WORKERS|" \
  -e "s|@LISTEN@|127.0.0.1:$nginx_port|" -e "s|@UPSTREAM@|$service|" \
  bench/gateway/nginx.conf.in >"$work/nginx/nginx.conf"
"$NGINX" -c "$work/nginx/nginx.conf" -p "$work/nginx" -e "$work/nginx/nginx-error.log" &
nginx_pid=$!
pids+=("$nginx_pid")
for _ in $(seq 1 200); do curl -s -o /dev/null "http://127.0.0.1:$nginx_port/" && break; sleep 0.02; done
bench_both nginx "127.0.0.1:$nginx_port" unique
stop_pid "$nginx_pid"

for store in memory sqlite; do
  for mode in unique fixed; do
    url=memory
    [[ $store == sqlite ]] && url="sqlite:$work/idem-$mode.db?durability=normal"
    log="$work/gateway-$store-$mode.log"
    build/release/idem gateway --listen 127.0.0.1:0 --upstream "http://$service" --store "$url" \
      --threads "$IDEM_THREADS" --store-threads "$IDEM_STORE_THREADS" >"$log" 2>&1 &
    gateway_pid=$!
    pids+=("$gateway_pid")
    gateway=$(address_after "$log" "gateway on")
    if [[ $mode == fixed ]]; then
      curl -s -o /dev/null -X POST "http://$gateway/v1/payments" -H "Idempotency-Key: bench-replay" \
        -H "Content-Type: application/json" -H "Authorization: Bearer bench-tenant" \
        -d '{"amount":1000,"currency":"EUR"}'
    fi
    name="idem-$store-$([[ $mode == unique ]] && echo first || echo replay)"
    bench_both "$name" "$gateway" "$mode"
    stop_pid "$gateway_pid"
  done
done

python3 - "${results[@]}" <<'PY'
import sys
rows = [r.split() for r in sys.argv[1:]]
by = {r[0]: (float(r[1]), float(r[2]), float(r[3]), int(r[4])) for r in rows}
nginx_rps = by["nginx"][0]
direct_p99 = by["direct"][2]
print()
print(f"{'case':<20} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'x nginx':>8} {'p99 +ms':>8} {'errors':>7}")
for name, (rps, p50, p99, errors) in by.items():
    added = "" if name == "direct" else f"{p99 - direct_p99:+.3f}"
    print(f"{name:<20} {rps:>9,.0f} {p50:>8.3f} {p99:>8.3f} {rps / nginx_rps:>8.2f} {added:>8} {errors:>7}")
print()
def aim(label, ok, figure):
    print(f"  {'met   ' if ok else 'missed'}  {label}: {figure}")
print("aims (req/s as a ratio to nginx; p99 over the direct upstream, one connection):")
for name, want in (("idem-memory-first", 0.9), ("idem-sqlite-first", 0.7)):
    r = by[name][0] / nginx_rps
    aim(f"{name} >= {want}x nginx", r >= want, f"{r:.2f}x")
for name in ("idem-memory-replay", "idem-sqlite-replay"):
    r = by[name][0] / nginx_rps
    aim(f"{name} >= 2x nginx", r >= 2.0, f"{r:.2f}x")
for name in ("idem-memory-first", "idem-sqlite-first", "idem-memory-replay", "idem-sqlite-replay"):
    added = by[name][2] - direct_p99
    aim(f"{name} p99 added <= 1 ms", added <= 1.0, f"{added:+.3f} ms")
if any(v[3] for v in by.values()):
    print("\nsome runs had errors (connect/read/write/timeout or non-2xx): their figures are suspect")
    sys.exit(1)
PY
