#!/usr/bin/env bash
# What the relay's scans for pending rows cost when the outbox's pending-rows index still holds
# the entries of rows published since the last VACUUM, from the first entry (as before schema
# version 16) and from the floor (idem.outbox_floor). Starts a throwaway PostgreSQL, enqueues
# BENCH_ROWS events into today's partition (with autovacuum off on it, as on a big partition
# autovacuum has not reached yet: it comes when a fifth of the rows changed), VACUUMs, publishes
# all but BENCH_PENDING of them with idem.outbox_lock and idem.outbox_settle (which leaves an
# old index entry per row), and then times, in one session each, alternating:
#
#   * idem.outbox_lock(1, 0) and idem.outbox_lock(1, floor - 1): the lock of a relay keeping up
#     with a low rate (every batch starts from the first pending row), rolled back;
#   * idem.outbox_stats(0) and idem.outbox_stats(floor): the relay's gauges, read every second.
#
# After a VACUUM of the partition, the same again: the scans' cost once the dead entries are
# gone. Prints the mean milliseconds per call and the ratio of the floor's to the start's.
#
#   bench/outbox-floor-bench.sh                    300,000 rows, 1,000 left pending, 50 calls
#   BENCH_ROWS=1000000 BENCH_CALLS=20 bench/outbox-floor-bench.sh
#   SKIP_BUILD=1 BENCH_IDEM=/path/to/idem bench/outbox-floor-bench.sh
#
# Uses build/release (built unless SKIP_BUILD=1). Not part of the test command.
set -euo pipefail
cd "$(dirname "$0")/.."
rows=${BENCH_ROWS:-300000}
pending=${BENCH_PENDING:-1000}
calls=${BENCH_CALLS:-50}
idem=${BENCH_IDEM:-build/release/idem}
for v in "$rows" "$pending" "$calls"; do
  [[ $v =~ ^[1-9][0-9]*$ ]] || { echo "outbox-floor-bench: counts must be positive integers" >&2; exit 2; }
done
(( pending < rows )) || { echo "outbox-floor-bench: BENCH_PENDING must be below BENCH_ROWS" >&2; exit 2; }
if [[ ${SKIP_BUILD:-0} != 1 ]]; then
  cmake --preset release >/dev/null
  cmake --build build/release --target idem -j2 >/dev/null
fi

source bench/lib/postgres-server.sh
dir=$(mktemp -d)
chmod 711 "$dir"
trap 'stop_postgres; rm -rf "$dir"' EXIT
start_postgres "$dir/pg" bench
psql() { "$pg_bin/psql" -qtA -h 127.0.0.1 -p "$pg_port" -U postgres "$@" bench; }
"$idem" migrate --store "postgresql://postgres@127.0.0.1:$pg_port/bench" >/dev/null
today=$(psql -c "SELECT 'idem.outbox_p' || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD')")
psql -c "SELECT count(idem.outbox_ensure_partition(idem.outbox_today() - g)) FROM generate_series(0, 30) g" \
  -c "ALTER TABLE $today SET (autovacuum_enabled = off)" >/dev/null
psql -c "BEGIN" -c "SELECT count(idem.outbox_enqueue('f-' || g, 'bench.created',
  convert_to(repeat('p', 128), 'UTF8'))) FROM generate_series(1, $rows) g" -c "COMMIT" >/dev/null
psql -c "VACUUM ANALYZE idem.outbox" >/dev/null
left=$((rows - pending))
while (( left > 0 )); do
  n=$(( left < 10000 ? left : 10000 ))
  psql -c "BEGIN" -c "SELECT idem.outbox_settle('', array_agg(id ORDER BY id), array_agg(day ORDER BY id),
    array_agg(id ORDER BY id), array_agg(false), '{}', '{}', NULL) FROM idem.outbox_lock($n, 0)" \
    -c "COMMIT" >/dev/null
  left=$((left - n))
done
floor() {
  local last xid
  last=$(psql -c "SELECT idem.outbox_last_id()")
  xid=$(psql -c "SELECT idem.outbox_floor_xid()")
  psql -c "SELECT idem.outbox_floor($last, '$xid', 0)"
}

# mean ms per call of two statements, alternating in one session: "label_a label_b" -> "a b"
timed() {
  local a=$1 b=$2 script="$dir/loop.sql"
  : >"$script"
  for _ in $(seq "$calls"); do
    printf 'BEGIN;\n\\timing on\nSELECT 1, count(*) FROM (%s) s;\n\\timing off\nROLLBACK;\n' "$a" >>"$script"
    printf 'BEGIN;\n\\timing on\nSELECT 2, count(*) FROM (%s) s;\n\\timing off\nROLLBACK;\n' "$b" >>"$script"
  done
  psql -f "$script" | paste - - |
    awk -F'[|\t ]+' '{t[$1] += $4; n[$1]++} END {printf "%.3f %.3f\n", t[1] / n[1], t[2] / n[2]}'
}

report() {  # phase
  local f lock stats
  f=$(floor)
  [[ $f =~ ^[0-9]+$ ]] || { echo "outbox-floor-bench: no floor ($f)" >&2; exit 1; }
  lock=$(timed "SELECT * FROM idem.outbox_lock(1, 0)" "SELECT * FROM idem.outbox_lock(1, $((f - 1)))")
  stats=$(timed "SELECT * FROM idem.outbox_stats(0)" "SELECT * FROM idem.outbox_stats($f)")
  printf '%-44s %10s %10s %8s\n' "$1: lock of 1 row" $lock \
    "$(awk '{printf "%.2fx", $2 / $1}' <<<"$lock")"
  printf '%-44s %10s %10s %8s\n' "$1: gauges ($pending pending)" $stats \
    "$(awk '{printf "%.2fx", $2 / $1}' <<<"$stats")"
}

echo "== $rows rows in today's partition, $pending pending, $calls calls each (ms per call)"
printf '%-44s %10s %10s %8s\n' "case" "from start" "from floor" "ratio"
report "$((rows - pending)) published, not vacuumed"
psql -c "VACUUM $today" >/dev/null
report "after VACUUM"
