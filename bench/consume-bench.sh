#!/usr/bin/env bash
# The worker layer's consume side, as ratios measured in one run on one machine:
#
#   1. messages/s through idem::worker::JetStreamConsumer with the inbox claim vs the same
#      consumer without it (each message: BEGIN, [inbox claim], a one-row INSERT, COMMIT, ack);
#      the aim is an inbox overhead of at most 15% (ratio >= 0.85). Next to them, the ceiling
#      for any inbox: the business write guarded by a bare INSERT ... ON CONFLICT DO NOTHING
#      into an unpartitioned table, in the same statement. Once per value of
#      messages_per_transaction in BENCH_GROUPS (default "1 16": one message per transaction,
#      and groups of 16 sharing BEGIN, claims and COMMIT)
#   2. messages/s through `idem consume` delivering to a trivial HTTP service vs a bare nats.c
#      pull-and-ack loop on the same server; the aim is >= 0.5x. Then the ceiling any sidecar
#      could reach here: wrk POSTing the same bodies to the same service over 64 keep-alive
#      connections measures the HTTP half alone, and a sidecar that cost nothing beyond a bare
#      pull-and-ack loop and wrk would deliver at 1 / (1/raw + 1/http) messages/s (both halves
#      share the two cores). And `idem consume --batch-size 32` (up to 32 messages per POST, the
#      service answering each item ack) against the same raw loop; the aim is >= 0.5x. And
#      the hard mix: every message with one of 1,000 ordering keys (Idem-Ordering-Key), one
#      message per POST, against the same messages without keys; the aim is >= 0.8x
#
#   bench/consume-bench.sh                   20,000 messages per run
#   BENCH_MESSAGES=50000 bench/consume-bench.sh
#   BENCH_GROUPS= bench/consume-bench.sh     only case 2 (BENCH_GROUPS lists the runtime cases)
#   BENCH_BATCH_FLAGS="--max-in-flight 256" bench/consume-bench.sh  more flags for the batch case
#   BENCH_SINK=threads bench/consume-bench.sh  the service with a thread per connection instead
#                                            of one event-loop thread
#
# Starts a throwaway nats-server -js and PostgreSQL 15 (fsync off) in a temp dir. Each case runs
# on a stream of its own; the runtime cases alternate (without, with, without, with) and the
# best of each is kept, so a noisy neighbour hurts both alike. Next to messages/s it prints the
# CPU time spent per message by every process involved (the client, nats-server, PostgreSQL,
# and for idem consume the sidecar and the service), which a loaded machine disturbs far less
# than throughput. Run it at low priority (nice) on a shared machine. Not part of the test
# command.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${BENCH_MESSAGES:-20000}

if [[ ${SKIP_BUILD:-0} != 1 ]]; then
  scripts/install-deps.sh
  source bench/lib/install-tools.sh
  install_tools consume-bench wrk
  cmake --preset release >/dev/null
  cmake --build build/release --target idem idem_consume_bench -j2 >/dev/null
fi
# BENCH_IDEM, BENCH_CONSUME: another build's binaries, to compare builds in the same minute
bench=${BENCH_CONSUME:-build/release/bench/idem_consume_bench}
idem=${BENCH_IDEM:-build/release/idem}

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
  -c "CALL idem.inbox_sweep_all()" >/dev/null

nats_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$dir/js"
nats-server -a 127.0.0.1 -p "$nats_port" -js -sd "$dir/js" >"$dir/nats.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do grep -q "Server is ready" "$dir/nats.log" && break; sleep 0.1; done
nats="nats://127.0.0.1:$nats_port"

# The highest / lowest of the numbers on standard input (separated by spaces or newlines).
best() { tr ' ' '\n' | grep . | sort -n | tail -1; }
least() { tr ' ' '\n' | grep . | sort -n | head -1; }
# CPU time (user + system, in clock ticks) of the servers: nats-server, and PostgreSQL's
# postmaster with its live backends and the ones that exited (cutime, cstime).
ticks() { awk '{t += $14 + $15 + $16 + $17} END {print t}' \
  $(for p in "${pids[0]}" "$pg_pid" $(pgrep -P "$pg_pid"); do
      [[ -r /proc/$p/stat ]] && echo "/proc/$p/stat"; done) 2>/dev/null; }
tick_us=$((1000000 / $(getconf CLK_TCK)))
# CPU microseconds per message: the client's own (cpu_us) plus the servers' ticks since $1.
per_msg() { python3 -c "print(round(($2 + ($(ticks) - $1) * $tick_us) / $n, 1))"; }

# --- 1. the C++ runtime, with and without the inbox ----------------------------------------------
# Sets w, wo, wg (best msgs/s with the inbox, without it, with the bare guard) and wc_, woc,
# wgc (least CPU us/msg) for messages_per_transaction $1.
runtime_case() {
  local group=$1 round mode stream t0 out r c
  local -A rates=() cpus=()
  for round in 1 2; do
    for mode in noinbox inbox guard; do
      stream="RT_${mode^^}_${group}_$round"
      $bench publish "$nats" "$stream" "$n"
      t0=$(ticks)
      out=$($bench runtime "$nats" "$stream" "$pg" "$n" "$mode" "$group")
      r=$(awk '/msgs\/s/ {print $2}' <<<"$out")
      c=$(per_msg "$t0" "$(awk '/cpu_us/ {print $2}' <<<"$out")")
      rates[$mode]+="$r "; cpus[$mode]+="$c "
    done
  done
  w=$(best <<<"${rates[inbox]}")
  wo=$(best <<<"${rates[noinbox]}")
  wg=$(best <<<"${rates[guard]}")
  wc_=$(least <<<"${cpus[inbox]}")
  woc=$(least <<<"${cpus[noinbox]}")
  wgc=$(least <<<"${cpus[guard]}")
}
runtime_lines=()
for group in ${BENCH_GROUPS-1 16}; do
  runtime_case "$group"
  runtime_lines+=("$(printf '%-46s %10s %14s' "runtime, no inbox, $group msg/txn" "$wo" "$woc")")
  runtime_lines+=("$(printf '%-46s %10s %14s' "runtime with the inbox claim, $group msg/txn" "$w" "$wc_")")
  runtime_lines+=("$(printf '%-46s %10s %14s' "runtime with a bare guard insert, $group msg/txn" "$wg" "$wgc")")
  runtime_lines+=("inbox at $group msg/txn: $(python3 -c "print(f'{$w/$wo:.2f}')")x of the consumer without it (aim >= 0.85); CPU per message $(python3 -c "print(f'{$woc/$wc_:.2f}')")x")
  runtime_lines+=("  the cheapest guard there is (an unpartitioned unique insert in the same statement): $(python3 -c "print(f'{$wg/$wo:.2f}')")x; CPU per message $(python3 -c "print(f'{$woc/$wgc:.2f}')")x")
done

# --- 2. idem consume to a trivial service vs a raw pull-and-ack loop -------------------------------
$bench publish "$nats" RAW "$n"
t0=$(ticks)
out=$($bench raw "$nats" RAW "$n")
raw=$(awk '/msgs\/s/ {print $2}' <<<"$out")
raw_cpu=$(per_msg "$t0" "$(awk '/cpu_us/ {print $2}' <<<"$out")")

$bench sink "${BENCH_SINK:-loop}" >"$dir/sink.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do grep -q "listening on" "$dir/sink.log" && break; sleep 0.05; done
sink=$(awk '/listening on/ {print $3}' "$dir/sink.log")
sink_pid=${pids[-1]}
# One idem consume run: binary $1 on stream $2, more flags after; prints "msgs/s
# cpu-us-per-msg-all cpu-us-per-msg-idem-consume cpu-us-per-msg-service". The sidecar is stopped
# once its CPU time is read (it runs in a subshell, so the cleanup's list never sees it: left
# idle, each one would keep polling NATS through every later case).
consume_case() {
  local bin=$1 stream=$2 t0 s0 rate side side_ticks sink_ticks
  shift 2
  $bench publish "$nats" "$stream" "$n" ${case_keys:-}
  t0=$(ticks)
  s0=$(awk '{print $14 + $15}' "/proc/$sink_pid/stat")
  $bin consume --nats "$nats" --stream "$stream" --consumer sidecar \
    --deliver "http://$sink/apply" --max-ack-pending 10000 "$@" >"$dir/consume-$stream.log" 2>&1 &
  side=$!
  rate=$($bench drain "$nats" "$stream" sidecar "$n" | awk '/msgs\/s/ {print $2}')
  side_ticks=$(awk '{print $14 + $15}' "/proc/$side/stat")
  sink_ticks=$(( $(awk '{print $14 + $15}' "/proc/$sink_pid/stat") - s0 ))
  line="$rate $(per_msg "$t0" $(( (side_ticks + sink_ticks) * tick_us ))) \
    $(python3 -c "print(round($side_ticks * $tick_us / $n, 1))") \
    $(python3 -c "print(round($sink_ticks * $tick_us / $n, 1))")"
  kill "$side"
  wait "$side" || true
  echo "$line"
}
# Two rounds (with BENCH_IDEM_B=FILE, another build's idem alternately); the best rate and
# the least CPU of each binary are kept.
binaries=("$idem")
[[ -n ${BENCH_IDEM_B:-} ]] && binaries+=("$BENCH_IDEM_B")
# The batch case ("batch") runs the first binary with --batch-size 32.
declare -A c_rate c_all c_idem c_sink
for round in 1 2; do
  for i in "${!binaries[@]}"; do
    read -r r a b c < <(consume_case "${binaries[$i]}" "SIDE_${i}_$round")
    c_rate[$i]+="$r "; c_all[$i]+="$a "; c_idem[$i]+="$b "; c_sink[$i]+="$c "
  done
  read -r r a b c < <(consume_case "$idem" "BATCH_$round" --batch-size 32 ${BENCH_BATCH_FLAGS:-})
  c_rate[batch]+="$r "; c_all[batch]+="$a "; c_idem[batch]+="$b "; c_sink[batch]+="$c "
  # The hard mix: every message carries one of 1,000 ordering keys (Idem-Ordering-Key), so
  # idem consume delivers each key's messages one at a time, in order.
  read -r r a b c < <(case_keys=1000 consume_case "$idem" "ORDERED_$round")
  c_rate[ordered]+="$r "; c_all[ordered]+="$a "; c_idem[ordered]+="$b "; c_sink[ordered]+="$c "
done
side=$(best <<<"${c_rate[0]}")
side_cpu=$(least <<<"${c_all[0]}")
idem_cpu=$(least <<<"${c_idem[0]}")
sink_cpu=$(least <<<"${c_sink[0]}")

# The HTTP half alone: wrk POSTing 128-byte bodies (the published messages' size) with the
# headers idem consume adds, over as many connections as idem consume's window.
http=""
if command -v wrk >/dev/null; then
  cat >"$dir/post.lua" <<'LUA'
wrk.method = "POST"
wrk.body = string.rep("x", 128)
wrk.headers["Content-Type"] = "application/octet-stream"
wrk.headers["Idempotency-Key"] = "SIDE:12345"
wrk.headers["Idem-Subject"] = "SIDE.x"
wrk.headers["Idem-Delivery-Count"] = "1"
wrk.headers["Idem-Stream"] = "SIDE"
wrk.headers["Idem-Stream-Sequence"] = "12345"
LUA
  wrk -t1 -c64 -d1s -s "$dir/post.lua" "http://$sink/apply" >/dev/null
  http=$(wrk -t1 -c64 -d5s -s "$dir/post.lua" "http://$sink/apply" |
    awk '/Requests\/sec/ {printf "%d", $2}')
fi

ratio() { python3 -c "print(f'{$1/$2:.2f}')"; }
echo "messages per run: $n"
printf '%-46s %10s %14s\n' case msgs/s 'cpu us/msg'
printf '%s\n' "${runtime_lines[@]}"
printf '%-46s %10s %14s\n' "raw nats.c pull-and-ack loop" "$raw" "$raw_cpu"
printf '%-46s %10s %14s\n' "idem consume -> trivial HTTP service" "$side" "$side_cpu"
echo "  of which idem consume $idem_cpu us/msg, the trivial service $sink_cpu us/msg"
if [[ -n ${BENCH_IDEM_B:-} ]]; then
  printf '%-46s %10s %14s\n' "  the same with $BENCH_IDEM_B" "$(best <<<"${c_rate[1]}")" \
    "$(least <<<"${c_all[1]}")"
  echo "  of which idem consume $(least <<<"${c_idem[1]}") us/msg," \
    "the trivial service $(least <<<"${c_sink[1]}") us/msg"
fi
echo "idem consume: $(ratio "$side" "$raw")x of the raw pull-and-ack loop;" \
  "CPU per message $(ratio "$raw_cpu" "$side_cpu")x"
batch=$(best <<<"${c_rate[batch]}")
batch_cpu=$(least <<<"${c_all[batch]}")
printf '%-46s %10s %14s\n' "idem consume --batch-size 32 -> the service" "$batch" "$batch_cpu"
echo "  of which idem consume $(least <<<"${c_idem[batch]}") us/msg," \
  "the trivial service $(least <<<"${c_sink[batch]}") us/msg"
echo "idem consume --batch-size 32: $(ratio "$batch" "$raw")x of the raw pull-and-ack loop" \
  "(aim >= 0.5); CPU per message $(ratio "$raw_cpu" "$batch_cpu")x"
if [[ -n $http ]]; then
  ceiling=$(python3 -c "print(int(1 / (1 / $raw + 1 / $http)))")
  printf '%-46s %10s\n' "wrk -> the same service, 64 connections" "$http"
  echo "ceiling for any sidecar here: $ceiling msgs/s = $(ratio "$ceiling" "$raw")x of the raw loop;" \
    "idem consume reaches $(ratio "$side" "$ceiling")x of it"
fi
ordered=$(best <<<"${c_rate[ordered]}")
printf '%-46s %10s %14s\n' "idem consume, 1,000 ordering keys" "$ordered" \
  "$(least <<<"${c_all[ordered]}")"
echo "ordered delivery over 1,000 keys: $(ratio "$ordered" "$side")x of unordered delivery" \
  "(aim >= 0.8)"
