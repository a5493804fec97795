#!/usr/bin/env bash
# idem relay against a bare nats.c asynchronous JetStream publisher, in one run, on one
# throwaway PostgreSQL and one throwaway nats-server -js.
#
#   bench/relay-bench.sh                    100,000 events of 128 bytes, latency for 10 s
#   BENCH_EVENTS=50000 BENCH_LATENCY_SECONDS=5 bench/relay-bench.sh
#   BENCH_RELAY_LOG=FILE                    keeps the relay's log (it is deleted otherwise)
#
# 1. Throughput. The reference publishes BENCH_EVENTS messages (Nats-Msg-Id each, up to 1000
#    unacknowledged) and waits for every PubAck. The relay drains the same number of outbox
#    rows, enqueued beforehand, with its defaults raised to --batch 1000 --max-pending 1000:
#    claim (SKIP LOCKED + lease), publish, PubAck, mark. Both to file-backed streams on the same
#    server. Prints both rates and the ratio (the issue's aim: >= 0.5x).
# 2. Latency. With the relay idle and listening, one producer enqueues 1,000 events/s, one
#    transaction each; a subscriber on the subject notes each arrival. Prints the p50/p99/max
#    of commit-to-consume (from COMMIT returning to the message reaching the subscriber).
# Run it outside the test suite, at low priority. Not part of the test command.
set -euo pipefail
cd "$(dirname "$0")/.."
events=${BENCH_EVENTS:-100000}
latency_seconds=${BENCH_LATENCY_SECONDS:-10}

if [[ ${SKIP_BUILD:-0} != 1 ]]; then
  scripts/install-deps.sh
  cmake --preset release >/dev/null
  cmake --build build/release --target idem idem_relay_bench -j2 >/dev/null
fi
bench=build/release/bench/idem_relay_bench
idem=${BENCH_IDEM:-build/release/idem}  # BENCH_IDEM: another build's idem, to compare

source bench/lib/postgres-server.sh
dir=$(mktemp -d)
chmod 711 "$dir"
relay_pid= nats_pid=
cleanup() {
  [[ -n $relay_pid ]] && kill -TERM "$relay_pid" 2>/dev/null && wait "$relay_pid" 2>/dev/null || true
  [[ -n $nats_pid ]] && kill -TERM "$nats_pid" 2>/dev/null && wait "$nats_pid" 2>/dev/null || true
  stop_postgres
  [[ -n ${BENCH_RELAY_LOG:-} && -f $dir/relay.log ]] && cp "$dir/relay.log" "$BENCH_RELAY_LOG"
  rm -rf "$dir"
}
trap cleanup EXIT
start_postgres "$dir/pg"
db="postgresql://postgres@127.0.0.1:$pg_port/bench"
conninfo="host=127.0.0.1 port=$pg_port user=postgres dbname=bench"
psql=("$pg_bin/psql" -qtA -h 127.0.0.1 -p "$pg_port" -U postgres bench)

nats_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$dir/nats"
nats-server -js -a 127.0.0.1 -p "$nats_port" -sd "$dir/nats" >"$dir/nats.log" 2>&1 &
nats_pid=$!
nats="nats://127.0.0.1:$nats_port"
sleep 1

"$idem" migrate --store "$db" >/dev/null
# The streams: created by a relay that exits at once (no rows yet), RAW by the same means.
for s in "RAW raw.>" "BENCH bench.>"; do
  set -- $s
  timeout 5 "$idem" relay --db "$db" --nats "$nats" --create-stream "$1" --subjects "$2" \
    --duplicate-window 2m >"$dir/create-$1.log" 2>&1 &
  sleep 1.5
  kill -TERM $! 2>/dev/null || true
  wait $! 2>/dev/null || true
done

echo "== throughput: $events events of 128 bytes"
raw=$($bench raw "$nats" raw.created "$events" 128 1000 | awk '/^raw/ {print $2}')

"${psql[@]}" -c "BEGIN; SELECT count(idem.outbox_enqueue('evt-' || g, 'bench.created',
  convert_to(repeat('p', 128), 'UTF8'))) FROM generate_series(1, $events) g; COMMIT;" >/dev/null
"${psql[@]}" -c "VACUUM ANALYZE idem.outbox" >/dev/null
"$idem" relay --db "$db" --nats "$nats" --stream BENCH --batch 1000 --max-pending 1000 \
  >"$dir/relay.log" 2>&1 &
relay_pid=$!
relay=$($bench drain "$nats" BENCH "$events" 300 | awk '/^drain/ {print $2}')
printf '%-28s %12s events/s\n' "raw nats.c async publisher" "$raw" "idem relay (outbox -> stream)" "$relay"
python3 -c "print(f'ratio relay/raw: {$relay/$raw:.2f}x')"
marked=$("${psql[@]}" -c "SELECT count(*) FROM idem.outbox WHERE state = 1")
echo "rows marked published: $marked of $events"

echo "== commit-to-consume latency at 1000 events/s for ${latency_seconds}s (relay idle, LISTEN/NOTIFY)"
$bench latency "$conninfo" "$nats" bench.latency 1000 "$latency_seconds"
