#!/usr/bin/env bash
# Redis store benchmark: begin+complete pairs/s through idem's Redis store against what
# redis-benchmark gets from the same server, in the same run, at the same concurrency, doing
# one `SET key NX PX 60000` per request (the least a claim can cost). A pair is two round
# trips (the begin script and the complete script), so the ratio printed is
#     (pairs/s x 2) / redis-benchmark requests/s      ("per round trip"; the aim is >= 0.5)
# and, for the replay path, lookups/s (one round trip each) / redis-benchmark requests/s.
#
#   bench/redis-bench.sh                 concurrency 1, 2, 8 and 16 (~1 minute)
#   CONCURRENCY="1 8" bench/redis-bench.sh
#
# Starts its own redis-server (no persistence, a free loopback port, a temp dir), stopped by
# PID on exit. The store runs in production mode (the server's clock). Not part of the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
case ${1:-} in
  -h | --help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
  "") ;;
  *) echo "bench/redis-bench.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
esac
CONCURRENCY=${CONCURRENCY:-1 2 8 16}
scripts/install-deps.sh
source bench/lib/install-tools.sh
install_tools redis-bench python3
scripts/build.sh release idem_store_bench >/dev/null

work=$(mktemp -d)
redis_pid=
cleanup() {
  [[ -n $redis_pid ]] && kill -TERM "$redis_pid" 2>/dev/null && wait "$redis_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --dir "$work" --save "" --appendonly no \
  --daemonize no >"$work/redis.log" 2>&1 &
redis_pid=$!
for _ in $(seq 1 250); do
  grep -q "Ready to accept connections" "$work/redis.log" && break
  sleep 0.02
done
grep -q "Ready to accept connections" "$work/redis.log" || { cat "$work/redis.log" >&2; exit 1; }

threads_filter=$(tr ' ' '|' <<<"$CONCURRENCY")
IDEM_BENCH_REDIS_URL="redis://127.0.0.1:$port" build/release/bench/idem_store_bench \
  --benchmark_filter="^Redis/.*threads:($threads_filter)\$" --benchmark_format=json \
  >"$work/store.json" 2>/dev/null

: >"$work/reference"
for c in $CONCURRENCY; do
  n=$((c == 1 ? 40000 : 150000))
  rps=$(redis-benchmark -p "$port" -c "$c" -n "$n" -r 100000000 -q \
          SET 'idem-ref:__rand_int__' v NX PX 60000 2>&1 | tr '\r' '\n' |
        grep -o '[0-9.]* requests per second' | tail -1 | cut -d' ' -f1)
  echo "$c $rps" >>"$work/reference"
  redis-cli -p "$port" FLUSHALL >/dev/null
done

python3 - "$work/store.json" "$work/reference" <<'PY'
import json, re, sys
ref = {int(c): float(r) for c, r in (l.split() for l in open(sys.argv[2]) if l.strip())}
rows = {}
for b in json.load(open(sys.argv[1]))["benchmarks"]:
    m = re.match(r"Redis/(\w+)/.*threads:(\d+)", b["name"])
    if not m or b.get("error_occurred"):
        print(f"{b['name']}: ERROR {b.get('error_message')}"); continue
    rows[(m.group(1), int(m.group(2)))] = b.get("pairs_per_s") or b.get("lookups_per_s")
print(f"{'concurrency':>11} {'redis-benchmark SET NX PX/s':>28} {'idem pairs/s':>13} "
      f"{'round trips/s':>14} {'ratio':>6} {'idem replays/s':>15} {'ratio':>6}")
for c in sorted(ref):
    pairs, replays = rows.get(("BeginComplete", c)), rows.get(("ReplayLookup", c))
    trips = pairs * 2 if pairs else None
    fmt = lambda v: f"{v:,.0f}" if v else "-"
    ratio = lambda v: f"{v / ref[c]:.2f}" if v else "-"
    print(f"{c:>11} {ref[c]:>28,.0f} {fmt(pairs):>13} {fmt(trips):>14} {ratio(trips):>6} "
          f"{fmt(replays):>15} {ratio(replays):>6}")
print("ratio: idem's round trips/s over redis-benchmark's requests/s at the same concurrency "
      "(aim >= 0.5)")
PY
