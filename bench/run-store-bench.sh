#!/usr/bin/env bash
# Store benchmarks, reported as ratios to references measured in the same run (these machines
# are noisy; absolute figures drift, ratios much less).
#
#   bench/run-store-bench.sh            build release, run every store benchmark (~1 minute)
#   BENCH_FILTER=Memory bench/run-store-bench.sh
#
# References:
#   map     one mutex-guarded std::unordered_map: insert a fresh key, then overwrite its value
#           with the response. The least an in-memory begin+complete can cost.
#   sqlite  raw SQLite, same pragmas (WAL, synchronous=NORMAL), a row shaped like idem's with the
#           same two indexes: one autocommit INSERT and one autocommit UPDATE. The least a
#           durable begin+complete (two commits) can cost on this machine.
# Not part of the test command.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
source bench/lib/install-tools.sh
install_tools run-store-bench python3
scripts/build.sh release idem_store_bench >/dev/null

out=$(mktemp)
trap 'rm -f "$out"' EXIT
build/release/bench/idem_store_bench --benchmark_filter="${BENCH_FILTER:-.}" \
  --benchmark_format=json >"$out" 2>/dev/null

python3 - "$out" <<'PY'
import json, re, sys

runs = json.load(open(sys.argv[1]))["benchmarks"]
rate = {}
for r in runs:
    if r.get("error_occurred"):
        print(f"{r['name']}: ERROR {r.get('error_message')}")
        continue
    m = re.match(r"([^/]+)/([^/]+)/.*threads:(\d+)", r["name"])
    value = r.get("pairs_per_s") or r.get("lookups_per_s")
    if m and value:
        rate[(m.group(1), m.group(2), int(m.group(3)))] = value

def ref(store, threads):
    name = {"Memory": "MapInsertUpdate", "Sqlite": "SqliteInsertUpdate"}[store]
    return rate.get(("Reference", name, threads))

print(f"{'store':8} {'benchmark':22} {'threads':>7} {'ops/s':>12} {'reference ops/s':>16} {'ratio':>7}")
for (store, bench, threads), value in sorted(rate.items()):
    if store == "Reference":
        continue
    reference = ref(store, threads) if bench.startswith("BeginComplete") else None
    ratio = f"{value / reference:7.2f}" if reference else "      -"
    ref_text = f"{reference:16,.0f}" if reference else f"{'-':>16}"
    print(f"{store.lower():8} {bench:22} {threads:>7} {value:12,.0f} {ref_text} {ratio}")
for (store, bench, threads), value in sorted(rate.items()):
    if store == "Reference":
        print(f"reference {bench} threads={threads}: {value:,.0f} pairs/s")
mem = rate.get(("Memory", "ReplayLookup", 1))
sql = rate.get(("Sqlite", "ReplayLookup", 1))
if mem and sql:
    print(f"sqlite replay lookups at 1 thread: {sql / mem:.3f}x the memory store's")
PY
