#!/usr/bin/env bash
# The worker layer's consume side, as ratios measured in one run on one machine:
#
#   1. messages/s through idem::worker::JetStreamConsumer with the inbox claim vs the same
#      consumer without it (each message: BEGIN, [inbox claim], a one-row INSERT, COMMIT, ack);
#      the aim is an inbox overhead of at most 15% (ratio >= 0.85)
#   2. messages/s through `idem consume` delivering to a trivial HTTP service vs a bare nats.c
#      pull-and-ack loop on the same server; the aim is >= 0.5x
#
#   bench/consume-bench.sh                   20,000 messages per run
#   BENCH_MESSAGES=50000 bench/consume-bench.sh
#
# Starts a throwaway nats-server -js and PostgreSQL 15 (fsync off) in a temp dir. Each case runs
# on a stream of its own; the runtime cases alternate (without, with, without, with) and the
# best of each is kept, so a noisy neighbour hurts both alike. Run it at low priority (nice)
# on a shared machine. Not part of the test command.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${BENCH_MESSAGES:-20000}

if [[ ${SKIP_BUILD:-0} != 1 ]]; then
  scripts/install-deps.sh
  cmake --preset release >/dev/null
  cmake --build build/release --target idem idem_consume_bench -j2 >/dev/null
fi
bench=build/release/bench/idem_consume_bench
idem=build/release/idem

source bench/lib/postgres-server.sh
dir=$(mktemp -d)
chmod 711 "$dir"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  stop_postgres
  rm -rf "$dir"
}
trap cleanup EXIT
start_postgres "$dir/pg"
pg="host=127.0.0.1 port=$pg_port user=postgres dbname=bench"
$idem migrate --store "postgresql://postgres@127.0.0.1:$pg_port/bench" >/dev/null
# The inbox's day partitions as a running deployment has them (the store's or a daily sweep
# creates them ahead), so the runs measure claims, not the first claim of each day creating
# its partition.
"$pg_bin/psql" -q -X -h 127.0.0.1 -p "$pg_port" -U postgres -d bench \
  -c "SELECT idem.inbox_sweep()" >/dev/null

nats_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$dir/js"
nats-server -a 127.0.0.1 -p "$nats_port" -js -sd "$dir/js" >"$dir/nats.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do grep -q "Server is ready" "$dir/nats.log" && break; sleep 0.1; done
nats="nats://127.0.0.1:$nats_port"

best() { sort -n | tail -1; }

# --- 1. the C++ runtime, with and without the inbox ----------------------------------------------
without=() with=()
for round in 1 2; do
  for mode in noinbox inbox; do
    stream="RT_${mode^^}_$round"
    $bench publish "$nats" "$stream" "$n"
    r=$($bench runtime "$nats" "$stream" "$pg" "$n" "$mode" | awk '/msgs\/s/ {print $2}')
    if [[ $mode == inbox ]]; then with+=("$r"); else without+=("$r"); fi
  done
done
w=$(printf '%s\n' "${with[@]}" | best)
wo=$(printf '%s\n' "${without[@]}" | best)

# --- 2. idem consume to a trivial service vs a raw pull-and-ack loop -------------------------------
$bench publish "$nats" RAW "$n"
raw=$($bench raw "$nats" RAW "$n" | awk '/msgs\/s/ {print $2}')

$bench sink >"$dir/sink.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do grep -q "listening on" "$dir/sink.log" && break; sleep 0.05; done
sink=$(awk '/listening on/ {print $3}' "$dir/sink.log")
$bench publish "$nats" SIDE "$n"
$idem consume --nats "$nats" --stream SIDE --consumer sidecar --deliver "http://$sink/apply" \
  --max-ack-pending 10000 >"$dir/consume.log" 2>&1 &
pids+=($!)
side=$($bench drain "$nats" SIDE sidecar "$n" | awk '/msgs\/s/ {print $2}')

ratio() { python3 -c "print(f'{$1/$2:.2f}')"; }
echo "messages per run: $n"
printf '%-46s %10s\n' case msgs/s
printf '%-46s %10s\n' "runtime, no inbox (BEGIN, INSERT, COMMIT, ack)" "$wo"
printf '%-46s %10s\n' "runtime with the inbox claim" "$w"
printf '%-46s %10s\n' "raw nats.c pull-and-ack loop" "$raw"
printf '%-46s %10s\n' "idem consume -> trivial HTTP service" "$side"
echo "inbox: $(ratio "$w" "$wo")x of the consumer without it (aim >= 0.85)"
echo "idem consume: $(ratio "$side" "$raw")x of the raw pull-and-ack loop (aim >= 0.5)"
