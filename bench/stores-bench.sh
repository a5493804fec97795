#!/usr/bin/env bash
# Every store side by side, in the same run: begin+complete pairs/s (first executions) and
# replay lookups/s through idem's Store interface, on memory, SQLite, PostgreSQL 15, one
# redis-server, a six-node Redis Cluster (three primaries, a replica each) and the tiered store
# (that same redis-server in front of that PostgreSQL). Memory and SQLite run in process at 1
# and 2 threads; the networked stores at each concurrency. Prints the figures, Redis Cluster's
# and the tiered store's ratio to the single Redis, the cost of one request at 1 client, and
# the cost of a Redis miss that finds the record in PostgreSQL (Redis lost it). Every server
# runs on this machine, so the cluster's ratio is the cost of its routing (the slot map, a pool
# per node), not the scale-out a cluster buys on several machines. docs/stores.md quotes it.
#
#   bench/stores-bench.sh                 concurrency 1, 8 and 16 (~4 minutes)
#   CONCURRENCY="1 16" bench/stores-bench.sh
#
# Starts its own servers (no persistence for Redis, free loopback ports, a temp dir), stopped
# by PID on exit. Not part of the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
case ${1:-} in
  -h | --help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
  "") ;;
  *) echo "bench/stores-bench.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
esac
CONCURRENCY=${CONCURRENCY:-1 8 16}
if [[ ${SKIP_BUILD:-0} != 1 ]]; then
  scripts/install-deps.sh
  scripts/build.sh release idem_store_bench >/dev/null
fi
source bench/lib/install-tools.sh
install_tools stores-bench python3

source bench/lib/postgres-server.sh
work=$(mktemp -d)
chmod 711 "$work"  # PostgreSQL runs as the postgres user when this script runs as root
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  stop_postgres
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

start_postgres "$work/pg" >/dev/null
"$pg_bin/psql" -qX -h 127.0.0.1 -p "$pg_port" -U postgres -d bench -c 'CREATE DATABASE pgstore' >/dev/null
durable="postgresql://postgres@127.0.0.1:$pg_port/bench"

threads_filter=$(tr ' ' '|' <<<"$CONCURRENCY")
cases="(BeginComplete|ReplayLookup)/.*threads:($threads_filter)\$"
bench() {  # bench OUT FILTER [VAR=VALUE...]: one idem_store_bench run with only those servers
  local out=$1 filter=$2
  shift 2
  env -u IDEM_BENCH_REDIS_URL -u IDEM_BENCH_DURABLE_URL -u IDEM_BENCH_POSTGRES_URL "$@" \
    build/release/bench/idem_store_bench --benchmark_filter="$filter" --benchmark_format=json \
    >"$out" 2>"$out.err" || { cat "$out.err" >&2; return 1; }
}
bench "$work/local.json" "^(Memory|Sqlite)/$cases"
bench "$work/postgres.json" "^Postgres/$cases" \
  IDEM_BENCH_POSTGRES_URL="postgresql://postgres@127.0.0.1:$pg_port/pgstore"
bench "$work/single.json" "^Redis/$cases" IDEM_BENCH_REDIS_URL="redis://127.0.0.1:$single"
bench "$work/cluster.json" "^Redis/$cases" \
  IDEM_BENCH_REDIS_URL="redis://${nodes[0]},${nodes[1]}?cluster=true"
bench "$work/tiered.json" "^Tiered/($cases|MissFoundInDurable)" \
  IDEM_BENCH_REDIS_URL="redis://127.0.0.1:$single" IDEM_BENCH_DURABLE_URL="$durable"

python3 - "$work"/{local,postgres,single,cluster,tiered}.json <<'PY'
import json, re, sys
def load(path, rename=None):
    rows = {}
    for b in json.load(open(path))["benchmarks"]:
        m = re.match(r"(\w+)/(\w+)/.*threads:(\d+)", b["name"])
        if not m or b.get("error_occurred"):
            print(f"{b['name']}: ERROR {b.get('error_message')}"); continue
        store = rename or m.group(1)
        rows[(store, m.group(2), int(m.group(3)))] = b.get("pairs_per_s") or b.get("lookups_per_s")
    return rows
rows = {}
rows.update(load(sys.argv[1]))
rows.update(load(sys.argv[2]))
rows.update(load(sys.argv[3], "Redis"))
rows.update(load(sys.argv[4], "Cluster"))
rows.update(load(sys.argv[5], "Tiered"))
stores = ["Memory", "Sqlite", "Postgres", "Redis", "Cluster", "Tiered"]
fmt = lambda v: f"{v:,.0f}" if v else "-"
ratio = lambda a, b: f"{b / a:.2f}" if a and b else "-"
for case, unit in (("BeginComplete", "first executions: begin+complete pairs/s"),
                   ("ReplayLookup", "replays: lookups/s")):
    print(unit)
    print(f"{'clients':>7}" + "".join(f"{s:>10}" for s in stores) +
          f"{'cluster/redis':>14}{'tiered/redis':>13}")
    for c in sorted({c for (_, k, c) in rows if k == case}):
        get = lambda s: rows.get((s, case, c))
        print(f"{c:>7}" + "".join(f"{fmt(get(s)):>10}" for s in stores) +
              f"{ratio(get('Redis'), get('Cluster')):>14}{ratio(get('Redis'), get('Tiered')):>13}")
print("cost of one request at 1 client, in microseconds (first execution / replay):")
for s in stores:
    pair, replay = rows.get((s, "BeginComplete", 1)), rows.get((s, "ReplayLookup", 1))
    us = lambda v: f"{1e6 / v:,.0f}" if v else "-"
    print(f"  {s:<9} {us(pair):>6} / {us(replay)}")
miss, hit = rows.get(("Tiered", "MissFoundInDurable", 1)), rows.get(("Redis", "ReplayLookup", 1))
if miss and hit:
    print(f"Redis miss found in PostgreSQL (read, copy back, replay), 1 client: {fmt(miss)}/s, "
          f"{1e3 / miss:.2f} ms each; ratio to a single-Redis replay {miss / hit:.2f}")
print("ratios over one redis-server, same run. Cluster: 3 primaries on this machine; tiered: "
      "that redis-server in front of a PostgreSQL 15 on this machine (synchronous_commit on).")
PY
