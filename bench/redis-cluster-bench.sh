#!/usr/bin/env bash
# Redis Cluster against one Redis, in the same run: begin+complete pairs/s (first executions) and
# replay lookups/s through idem's Redis store, first on a standalone redis-server, then on a
# six-node cluster (three primaries, a replica each), at the same concurrencies. Prints both and
# the ratio cluster / single. Every node runs on this machine, so the ratio is the cost of the
# cluster's routing (the slot map, a pool per node), not the scale-out a cluster buys on several
# machines.
#
#   bench/redis-cluster-bench.sh                 concurrency 1, 8 and 16 (~1 minute)
#   CONCURRENCY="1 16" bench/redis-cluster-bench.sh
#
# Starts its own servers (no persistence, free loopback ports, a temp dir), stopped by PID on
# exit. Not part of the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
case ${1:-} in
  -h | --help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
  "") ;;
  *) echo "bench/redis-cluster-bench.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
esac
CONCURRENCY=${CONCURRENCY:-1 8 16}
if [[ ${SKIP_BUILD:-0} != 1 ]]; then
  scripts/install-deps.sh
  scripts/build.sh release >/dev/null
fi
command -v python3 >/dev/null || { apt-get install -y -qq python3 >/dev/null; }

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

# Cluster nodes use port + 10000 for their bus: keep ports below 55536.
free_port() {
  python3 -c 'import socket
while True:
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close()
    if p < 55536: print(p); break'
}

# start_redis NAME [ARGS...]: prints the port once the server is ready.
start_redis() {
  local name=$1 port
  shift
  port=$(free_port)
  mkdir -p "$work/$name"
  redis-server --port "$port" --bind 127.0.0.1 --dir "$work/$name" --save "" --appendonly no \
    --daemonize no "$@" >"$work/$name/redis.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 250); do
    grep -q "Ready to accept connections" "$work/$name/redis.log" && break
    sleep 0.02
  done
  grep -q "Ready to accept connections" "$work/$name/redis.log" ||
    { cat "$work/$name/redis.log" >&2; return 1; }
  echo "$port"
}

single=$(start_redis single)
nodes=()
for i in 1 2 3 4 5 6; do
  nodes+=("127.0.0.1:$(start_redis "node$i" --cluster-enabled yes --cluster-config-file nodes.conf \
    --cluster-node-timeout 5000)")
done
redis-cli --cluster create "${nodes[@]}" --cluster-replicas 1 --cluster-yes >"$work/create.log" 2>&1 ||
  { cat "$work/create.log" >&2; exit 1; }
for _ in $(seq 1 500); do
  ok=0
  for n in "${nodes[@]}"; do
    redis-cli -h "${n%:*}" -p "${n#*:}" CLUSTER INFO | grep -q "cluster_state:ok" && ok=$((ok + 1))
  done
  [[ $ok == 6 ]] && break
  sleep 0.02
done

threads_filter=$(tr ' ' '|' <<<"$CONCURRENCY")
run() {  # run URL OUT
  IDEM_BENCH_REDIS_URL="$1" build/release/bench/idem_store_bench \
    --benchmark_filter="^Redis/.*threads:($threads_filter)\$" --benchmark_format=json \
    >"$2" 2>/dev/null
}
run "redis://127.0.0.1:$single" "$work/single.json"
run "redis://${nodes[0]},${nodes[1]}?cluster=true" "$work/cluster.json"

python3 - "$work/single.json" "$work/cluster.json" <<'PY'
import json, re, sys
def load(path):
    rows = {}
    for b in json.load(open(path))["benchmarks"]:
        m = re.match(r"Redis/(\w+)/.*threads:(\d+)", b["name"])
        if not m or b.get("error_occurred"):
            print(f"{b['name']}: ERROR {b.get('error_message')}"); continue
        rows[(m.group(1), int(m.group(2)))] = b.get("pairs_per_s") or b.get("lookups_per_s")
    return rows
single, cluster = load(sys.argv[1]), load(sys.argv[2])
print(f"{'concurrency':>11} {'single pairs/s':>15} {'cluster pairs/s':>16} {'ratio':>6} "
      f"{'single replays/s':>17} {'cluster replays/s':>18} {'ratio':>6}")
for c in sorted({c for _, c in single}):
    sp, cp = single.get(("BeginComplete", c)), cluster.get(("BeginComplete", c))
    sr, cr = single.get(("ReplayLookup", c)), cluster.get(("ReplayLookup", c))
    fmt = lambda v: f"{v:,.0f}" if v else "-"
    ratio = lambda a, b: f"{b / a:.2f}" if a and b else "-"
    print(f"{c:>11} {fmt(sp):>15} {fmt(cp):>16} {ratio(sp, cp):>6} {fmt(sr):>17} {fmt(cr):>18} "
          f"{ratio(sr, cr):>6}")
print("ratio: Redis Cluster (3 primaries on this machine) over one redis-server, same run")
PY
