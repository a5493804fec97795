#!/usr/bin/env bash
# idem relay against a bare nats.c asynchronous JetStream publisher, in one run, on one
# throwaway PostgreSQL and one throwaway nats-server -js.
#
#   bench/relay-bench.sh                    100,000 events of 128 bytes, latency for 10 s
#   BENCH_EVENTS=50000 BENCH_LATENCY_SECONDS=5 bench/relay-bench.sh
#   BENCH_IDEM=FILE                         the idem binary to measure (default: this build's)
#   BENCH_IDEM_B=FILE                       a second idem binary (another build) measured in the
#                                           same run, alternately with the first, each on a
#                                           database of its own
#   BENCH_ROUNDS=N                          rounds (default 1, or 2 with BENCH_IDEM_B); each
#                                           round runs every case once; the best rate and the
#                                           least CPU per event of each case are printed
#   BENCH_RELAY_LOG=FILE                    keeps the last relay's log (it is deleted otherwise)
#   BENCH_MIXES="unkeyed keys7 keys1000"    the outboxes each relay drains, one case each per
#                                           round (default all three): unkeyed, no ordering key;
#                                           keys7, one row in ten over 7 ordering keys; keys1000,
#                                           every row over 1,000 keys. Each keyed mix's rate is
#                                           printed as a ratio to the same relay's rate on
#                                           unkeyed rows (the issue's aim: >= 0.8x)
#   BENCH_DAYS=K                            day partitions before today's in each outbox
#                                           (default 30: what --retention-days 30 keeps in
#                                           steady state; 0: today's only)
#   BENCH_BARE_VARIANTS="plain locked functions hot"
#                                           the ceiling's variants to run (default plain; see
#                                           relay_bench.cc: locked adds the row locks, functions
#                                           the relay's own lock and settle, one batch at a time;
#                                           hot is plain on an outbox whose mark can be a HOT
#                                           update: no index predicate on state; its pages keep
#                                           the outbox's fillfactor of 45 unless
#                                           BENCH_HOT_FILLFACTOR=N sets another; queue is hot
#                                           with the pending ids kept in a narrow queue table,
#                                           idem.outbox_queue, read with a join and emptied by
#                                           the mark: what finding pending rows without an index
#                                           on state costs the relay)
#   BENCH_B_HOT=1                           drops, in the second build's database, the three
#                                           indexes whose predicates name state, so that its
#                                           relay's settles are HOT updates (an experiment; with
#                                           BENCH_IDEM_B set to the first build, it shows what
#                                           that alone changes for a whole relay)
#   BENCH_PERF=PREFIX                       records CPU profiles of the relay runs (perf record
#                                           -g): PREFIX-relay-V.data for the relay process and
#                                           PREFIX-postgres-V.data system-wide, since the
#                                           relay's backends start after the recording does
#                                           (`perf report --comm postgres`); the recording
#                                           itself costs CPU, so read no rates from such a run
#   BENCH_PERF_CALL_GRAPH=dwarf             how the relay's profile records call chains (default
#                                           fp; dwarf names the callers inside libc and nats.c,
#                                           which have no frame pointers, at a larger file)
#   BENCH_PG_STATEMENTS=N                   after each relay or bare relay run, prints the N
#                                           statements that took PostgreSQL the most time in it
#                                           (pg_stat_statements, nested ones too: a function's
#                                           time includes theirs): us per event (wall time, so
#                                           waits count), calls, ms per call, rows; the tracking
#                                           itself costs CPU
#
# 1. Throughput. The reference publishes BENCH_EVENTS messages (Nats-Msg-Id each, up to 1000
#    unacknowledged) and waits for every PubAck. The relay drains the same number of outbox
#    rows, enqueued beforehand, with its defaults raised to --batch 1000 --max-pending 1000:
#    lock a batch (SKIP LOCKED), publish, PubAck, settle. Each case to a file-backed stream of
#    its own on the same server. Prints both rates and the ratio (the issue's aim: >= 0.5x).
#    Next to each rate: the CPU time per event of every process involved (the publisher or
#    the relay, nats-server, and PostgreSQL's backends and background processes), which a
#    loaded machine disturbs far less than the rate.
#    Then the ceiling, the "bare relay" (relay_bench bare): the least work any relay must do
#    per event, with no locks, functions or attempt records: read a batch of pending rows,
#    publish them as the raw publisher does, mark the previous batch with one UPDATE while this
#    one's PubAcks arrive. It is not a relay (one instance only, reads past its rows by id):
#    it says how far the aim is from what the work itself costs here.
# 2. Latency. With the relay idle and listening, one producer enqueues 1,000 events/s, one
#    transaction each; a subscriber on the subject notes each arrival. Prints the p50/p99/max
#    of commit-to-consume (from COMMIT returning to the message reaching the subscriber).
# Run it outside the test suite, at low priority. Not part of the test command.
set -euo pipefail
cd "$(dirname "$0")/.."
events=${BENCH_EVENTS:-100000}
days=${BENCH_DAYS:-30}
bare_variants=${BENCH_BARE_VARIANTS:-plain}
for variant in $bare_variants; do
  [[ $variant =~ ^(plain|locked|functions|hot|queue)$ ]] ||
    { echo "BENCH_BARE_VARIANTS: '$variant' is not plain, locked, functions, hot or queue" >&2; exit 2; }
done
[[ " $bare_variants " == *" plain "* ]] || bare_variants="plain $bare_variants"
latency_seconds=${BENCH_LATENCY_SECONDS:-10}
mixes=${BENCH_MIXES:-unkeyed keys7 keys1000}
for mix in $mixes; do
  [[ $mix =~ ^(unkeyed|keys7|keys1000)$ ]] ||
    { echo "BENCH_MIXES: '$mix' is not unkeyed, keys7 or keys1000" >&2; exit 2; }
done
[[ " $mixes " == *" unkeyed "* ]] || mixes="unkeyed $mixes"

if [[ ${SKIP_BUILD:-0} != 1 ]]; then
  scripts/install-deps.sh
  cmake --preset release >/dev/null
  cmake --build build/release --target idem idem_relay_bench -j2 >/dev/null
fi
bench=build/release/bench/idem_relay_bench
idems=("${BENCH_IDEM:-build/release/idem}")
[[ -n ${BENCH_IDEM_B:-} ]] && idems+=("$BENCH_IDEM_B")
rounds=${BENCH_ROUNDS:-${#idems[@]}}
names=(a b)

source bench/lib/postgres-server.sh
pg_statements=${BENCH_PG_STATEMENTS:-0}
[[ $pg_statements =~ ^[0-9]+$ ]] || { echo "BENCH_PG_STATEMENTS: '$pg_statements' is not a count" >&2; exit 2; }
if (( pg_statements > 0 )); then
  pg_server_options=(-c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all)
fi
dir=$(mktemp -d)
chmod 711 "$dir"
relay_pid= nats_pid=
stop_relay() {
  [[ -n $relay_pid ]] && kill -TERM "$relay_pid" 2>/dev/null && wait "$relay_pid" 2>/dev/null || true
  relay_pid=
}
cleanup() {
  stop_relay
  [[ -n $nats_pid ]] && kill -TERM "$nats_pid" 2>/dev/null && wait "$nats_pid" 2>/dev/null || true
  stop_postgres
  [[ -n ${BENCH_RELAY_LOG:-} && -f $dir/relay.log ]] && cp "$dir/relay.log" "$BENCH_RELAY_LOG"
  rm -rf "$dir"
}
trap cleanup EXIT
start_postgres "$dir/pg"
psql() { "$pg_bin/psql" -qtA -h 127.0.0.1 -p "$pg_port" -U postgres "$@"; }

nats_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$dir/nats"
nats-server -js -a 127.0.0.1 -p "$nats_port" -sd "$dir/nats" >"$dir/nats.log" 2>&1 &
nats_pid=$!
nats="nats://127.0.0.1:$nats_port"
for _ in $(seq 100); do grep -q "Server is ready" "$dir/nats.log" && break; sleep 0.1; done

# One database per idem binary (each migrates its own schema version), with the day
# partitions a running relay's retention keeps: every statement over idem.outbox plans or
# prunes across them, so a lone partition would flatter whatever is planned per call.
for v in "${!idems[@]}"; do
  psql -c "CREATE DATABASE bench_${names[$v]}" postgres
  "${idems[$v]}" migrate --store "postgresql://postgres@127.0.0.1:$pg_port/bench_${names[$v]}" >/dev/null
  psql -c "SELECT count(idem.outbox_ensure_partition(idem.outbox_today() - g))
             FROM generate_series(0, $days) g" "bench_${names[$v]}" >/dev/null
  if (( pg_statements > 0 )); then psql -c "CREATE EXTENSION pg_stat_statements" "bench_${names[$v]}"; fi
done
# Drops the outbox's indexes whose predicates name state: a row whose indexed or predicate
# columns change cannot be updated in place, as a HOT update (an experiment, not a schema idem
# ships).
drop_state_indexes() {  # database
  psql -c "DROP INDEX idem.outbox_pending, idem.outbox_parked, idem.outbox_key_pending" "$1"
}
if [[ ${BENCH_B_HOT:-0} == 1 ]]; then
  [[ ${#idems[@]} == 2 ]] || { echo "BENCH_B_HOT=1 needs BENCH_IDEM_B" >&2; exit 2; }
  drop_state_indexes bench_b
fi
# The "hot" and "queue" ceilings' outbox: the first build's schema without those indexes (a
# mark that is not HOT gets a new index entry and a full new tuple in the WAL). Its pages have
# the room for the new versions already (fillfactor 45, schema version 8).
if [[ " $bare_variants " == *" hot "* || " $bare_variants " == *" queue "* ]]; then
  psql -c "CREATE DATABASE bench_hot" postgres
  "${idems[0]}" migrate --store "postgresql://postgres@127.0.0.1:$pg_port/bench_hot" >/dev/null
  psql -c "SELECT count(idem.outbox_ensure_partition(idem.outbox_today() - g))
             FROM generate_series(0, $days) g" bench_hot >/dev/null
  drop_state_indexes bench_hot
  if [[ -n ${BENCH_HOT_FILLFACTOR:-} ]]; then
    psql -c "DO \$\$ DECLARE p regclass; BEGIN
               FOR p IN SELECT inhrelid::regclass FROM pg_inherits WHERE inhparent = 'idem.outbox'::regclass LOOP
                 EXECUTE format('ALTER TABLE %s SET (fillfactor = %s)', p, $BENCH_HOT_FILLFACTOR);
               END LOOP; END \$\$" bench_hot
  fi
  psql -c "CREATE TABLE idem.outbox_queue (id bigint PRIMARY KEY, day integer NOT NULL)" bench_hot
  if (( pg_statements > 0 )); then psql -c "CREATE EXTENSION pg_stat_statements" bench_hot; fi
fi

# The statements of the relay run just measured, most time first (BENCH_PG_STATEMENTS).
print_statements() {  # database label
  psql -F ' | ' -c "SELECT round((total_exec_time * 1000 / $events)::numeric, 2) AS us_per_event,
      calls, round(mean_exec_time::numeric, 3) AS mean_ms, rows,
      CASE WHEN toplevel THEN '' ELSE '(nested) ' END
        || left(regexp_replace(query, '\s+', ' ', 'g'), 110)
    FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = '$1')
    ORDER BY total_exec_time DESC LIMIT $pg_statements" "$1" | sed "s/^/  [$2] /"
}

# CPU time (user + system, clock ticks) of nats-server; of PostgreSQL's postmaster with its live
# backends and the ones that exited (cutime, cstime); of one process (all its threads).
nats_ticks() { awk '{print $14 + $15}' "/proc/$nats_pid/stat"; }
# A backend may exit between the listing and the read: its file is skipped, not an error. The
# postmaster is read last, so that a backend exiting meanwhile is counted (in its children's
# time) rather than lost.
pg_ticks() {
  local p
  for p in $(pgrep -P "$pg_pid") "$pg_pid"; do cat "/proc/$p/stat" 2>/dev/null || true; done |
    awk '{t += $14 + $15 + $16 + $17} END {print t + 0}'
}
proc_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
tick_us=$((1000000 / $(getconf CLK_TCK)))
per_event() { python3 -c "print(f'{$1 * $tick_us / $events:.1f}')"; }

declare -A rate cpu detail by_round hot_share
keep() {  # case rate cpu detail: keeps the best rate and the least CPU per event of a case,
  local c=$1  # and every round's rate
  by_round[$c]+="$2 "
  if [[ -z ${rate[$c]:-} ]] || (( $2 > ${rate[$c]} )); then rate[$c]=$2; fi
  if [[ -z ${cpu[$c]:-} ]] || python3 -c "import sys; sys.exit(0 if $3 < ${cpu[$c]} else 1)"; then
    cpu[$c]=$3 detail[$c]=$4
  fi
}

run_raw() {  # round
  local stream="RAW$1" n0 out c
  $bench stream "$nats" "$stream" "raw$1.>"
  n0=$(nats_ticks)
  out=$($bench raw "$nats" "raw$1.created" "$events" 128 1000)
  local pub_us=$(awk '/^cpu_us/ {print $2}' <<<"$out")
  local nats_t=$(( $(nats_ticks) - n0 ))
  c=$(python3 -c "print(f'{($pub_us + $nats_t * $tick_us) / $events:.1f}')")
  keep raw "$(awk '/^raw/ {print $2}' <<<"$out")" "$c" \
    "publisher $(python3 -c "print(f'{$pub_us / $events:.1f}')"), nats-server $(per_event "$nats_t")"
}

# The ordering key of row g in each mix (SQL).
mix_key() {
  case $1 in
    unkeyed) echo "NULL" ;;
    keys7) echo "CASE WHEN g % 10 = 0 THEN 'ok-' || (g % 7) END" ;;  # 10% of rows over 7 keys
    keys1000) echo "'k-' || (g % 1000)" ;;                              # every row, 1,000 keys
  esac
}
mix_label() {
  case $1 in
    unkeyed) echo "" ;;
    keys7) echo ", 10% over 7 keys" ;;
    keys1000) echo ", 100% over 1000 keys" ;;
  esac
}

run_relay() {  # variant round mix
  local v=$1 name=${names[$1]} mix=${3:-unkeyed} tag=""
  [[ $mix != unkeyed ]] && tag="${mix#keys}k"
  local stream="R${names[$1]^^}$2${tag^^}" subject="r${names[$1]}$2$tag.created"
  local db="bench_$name" n0 p0 r relay_t nats_t pg_t marked c="relay_$name"
  [[ $mix != unkeyed ]] && c="relay_${name}_$mix"
  $bench stream "$nats" "$stream" "r$name$2$tag.>"
  psql -c "BEGIN; SELECT count(idem.outbox_enqueue('evt-$2$tag-' || g, '$subject',
    convert_to(repeat('p', 128), 'UTF8'), '{}', $(mix_key "$mix"))) FROM generate_series(1, $events) g;
    COMMIT;" "$db" >/dev/null
  psql -c "VACUUM ANALYZE idem.outbox" "$db" >/dev/null
  if (( pg_statements > 0 )); then psql -c "SELECT pg_stat_statements_reset()" "$db" >/dev/null; fi
  n0=$(nats_ticks) p0=$(pg_ticks)
  "${idems[$v]}" relay --db "postgresql://postgres@127.0.0.1:$pg_port/$db" --nats "$nats" \
    --stream "$stream" --batch 1000 --max-pending 1000 >"$dir/relay.log" 2>&1 &
  relay_pid=$!
  local perfs=()
  if [[ -n ${BENCH_PERF:-} ]]; then
    perf record -q --call-graph "${BENCH_PERF_CALL_GRAPH:-fp}" -o "$BENCH_PERF-relay-$name.data" -p "$relay_pid" 2>/dev/null &
    perfs+=($!)
    perf record -q -g -a -o "$BENCH_PERF-postgres-$name.data" 2>/dev/null &
    perfs+=($!)
  fi
  r=$($bench drain "$nats" "$stream" "$events" 300 | awk '/^drain/ {print $2}')
  if ! kill -0 "$relay_pid" 2>/dev/null || [[ -z $r ]]; then
    echo "relay $name round $2 ($mix) failed; its log:" >&2
    cat "$dir/relay.log" >&2
    exit 1
  fi
  relay_t=$(proc_ticks "$relay_pid") nats_t=$(( $(nats_ticks) - n0 )) pg_t=$(( $(pg_ticks) - p0 ))
  for p in "${perfs[@]}"; do kill -INT "$p"; wait "$p" || true; done
  stop_relay
  if (( pg_statements > 0 )); then print_statements "$db" "relay $name round $2 $mix"; fi
  marked=$(psql -c "SELECT count(*) FROM idem.outbox WHERE state = 1 AND subject = '$subject'" "$db")
  [[ $marked == "$events" ]] || echo "warning: relay $name round $2 ($mix) marked $marked of $events rows" >&2
  # The run's aftermath (vacuum of the rows it updated, a checkpoint) happens here, outside every
  # measured window, rather than in the next case's.
  psql -c "VACUUM idem.outbox" "$db" >/dev/null
  psql -c "CHECKPOINT" "$db" >/dev/null
  keep "$c" "$r" "$(per_event $((relay_t + nats_t + pg_t)))" \
    "relay $(per_event "$relay_t"), nats-server $(per_event "$nats_t"), postgresql $(per_event "$pg_t")"
}

run_bare() {  # round variant: the ceiling, on the first build's database (hot, queue: bench_hot)
  local variant=$2 tag="bare$1${2:0:1}" mode=$2 db="bench_${names[0]}"
  [[ $variant == hot ]] && mode=plain db=bench_hot
  [[ $variant == queue ]] && db=bench_hot
  local stream="${tag^^}" subject="$tag.created" n0 p0 r out bare_pid nats_t pg_t
  $bench stream "$nats" "$stream" "$tag.>"
  psql -c "BEGIN; SELECT count(idem.outbox_enqueue('$tag-' || g, '$subject',
    convert_to(repeat('p', 128), 'UTF8'))) FROM generate_series(1, $events) g; COMMIT;" "$db" >/dev/null
  if [[ $variant == queue ]]; then
    psql -c "INSERT INTO idem.outbox_queue SELECT id, day FROM idem.outbox WHERE subject = '$subject'" "$db" >/dev/null
    psql -c "VACUUM ANALYZE idem.outbox_queue" "$db" >/dev/null
  fi
  [[ $db == bench_hot ]] && psql -c "SELECT pg_stat_reset()" "$db" >/dev/null  # for the HOT share
  psql -c "VACUUM ANALYZE idem.outbox" "$db" >/dev/null
  if (( pg_statements > 0 )); then psql -c "SELECT pg_stat_statements_reset()" "$db" >/dev/null; fi
  n0=$(nats_ticks) p0=$(pg_ticks)
  $bench bare "host=127.0.0.1 port=$pg_port user=postgres dbname=$db" "$nats" "$events" 1000 1000 \
    "$mode" >"$dir/bare.out" &
  bare_pid=$!
  r=$($bench drain "$nats" "$stream" "$events" 300 | awk '/^drain/ {print $2}')
  wait "$bare_pid" || { echo "bare relay ($variant) round $1 failed" >&2; exit 1; }
  sleep 0.5  # its backend exits after it: counted once gone, in the postmaster's children's time
  nats_t=$(( $(nats_ticks) - n0 )) pg_t=$(( $(pg_ticks) - p0 ))
  out=$(cat "$dir/bare.out")
  if (( pg_statements > 0 )); then print_statements "$db" "bare $variant round $1"; fi
  [[ $(awk '/^marked/ {print $2}' <<<"$out") == "$events" ]] ||
    echo "warning: bare relay ($variant) round $1: $(grep marked <<<"$out") of $events rows" >&2
  if [[ $variant == hot || $variant == queue ]]; then
    hot_share[$variant]=$(psql -c "SELECT round(100.0 * sum(n_tup_hot_upd) / nullif(sum(n_tup_upd), 0))
                           FROM pg_stat_user_tables WHERE schemaname = 'idem'" "$db")
  fi
  psql -c "VACUUM idem.outbox" "$db" >/dev/null
  psql -c "CHECKPOINT" "$db" >/dev/null
  local own_us=$(awk '/^cpu_us/ {print $2}' <<<"$out")
  keep "bare_$variant" "$r" "$(python3 -c "print(f'{($own_us + ($nats_t + $pg_t) * $tick_us) / $events:.1f}')")" \
    "bare relay $(python3 -c "print(f'{$own_us / $events:.1f}')"), nats-server $(per_event "$nats_t"), postgresql $(per_event "$pg_t")"
}

echo "== throughput: $events events of 128 bytes, $rounds round(s), outboxes with $days day partitions before today's"
for round in $(seq "$rounds"); do
  run_raw "$round"
  # Alternate which build goes first, so neither always follows the other.
  order=("${!idems[@]}")
  (( round % 2 == 0 )) && order=($(printf '%s\n' "${order[@]}" | tac))
  for v in "${order[@]}"; do
    for mix in $mixes; do run_relay "$v" "$round" "$mix"; done
  done
  for variant in $bare_variants; do run_bare "$round" "$variant"; done
done
printf '%-34s %10s %13s  %s\n' case events/s 'cpu us/event' 'of which (us/event)'
printf '%-34s %10s %13s  %s\n' "raw nats.c async publisher" "${rate[raw]}" "${cpu[raw]}" "${detail[raw]}"
if [[ ${BENCH_B_HOT:-0} == 1 ]]; then
  echo "relay b's database, updates and HOT updates: $(psql -F ' and ' -c "SELECT sum(n_tup_upd), sum(n_tup_hot_upd)
    FROM pg_stat_user_tables WHERE schemaname = 'idem'" bench_b)"
fi
for v in "${!idems[@]}"; do
  c="relay_${names[$v]}"
  label="idem relay (outbox -> stream)"
  (( ${#idems[@]} > 1 )) && label="idem relay ${names[$v]}: $(basename "$(dirname "${idems[$v]}")")/$(basename "${idems[$v]}")"
  printf '%-34s %10s %13s  %s\n' "${label:0:34}" "${rate[$c]}" "${cpu[$c]}" "${detail[$c]}"
  for mix in $mixes; do
    [[ $mix == unkeyed ]] && continue
    l="${label:0:34}"
    l="${l:0:$((34 - ${#mix} - 3))} ($mix)"
    printf '%-34s %10s %13s  %s\n' "$l" "${rate[${c}_$mix]}" "${cpu[${c}_$mix]}" "${detail[${c}_$mix]}"
  done
done
for variant in $bare_variants; do
  label="bare relay (ceiling)"
  [[ $variant != plain ]] && label="bare relay, $variant"
  [[ $variant == hot || $variant == queue ]] && label="bare relay, $variant (${hot_share[$variant]:-?}% HOT)"
  printf '%-34s %10s %13s  %s\n' "$label" "${rate[bare_$variant]}" "${cpu[bare_$variant]}" "${detail[bare_$variant]}"
done
for v in "${!idems[@]}"; do
  c="relay_${names[$v]}"
  python3 -c "print(f'ratio relay ${names[$v]}/raw: {${rate[$c]}/${rate[raw]}:.2f}x (CPU per event {${cpu[$c]}/${cpu[raw]}:.2f}x the reference); relay ${names[$v]}/bare: {${rate[$c]}/${rate[bare_plain]}:.2f}x')"
done
# The keyed mixes against the same relay's unkeyed rows (the aim: >= 0.8x), best rates.
for v in "${!idems[@]}"; do
  c="relay_${names[$v]}"
  for mix in $mixes; do
    [[ $mix == unkeyed ]] && continue
    python3 -c "print(f'ratio relay ${names[$v]} keyed/unkeyed$(mix_label "$mix"): {${rate[${c}_$mix]}/${rate[$c]}:.2f}x (CPU per event {${cpu[${c}_$mix]}/${cpu[$c]}:.2f}x)')"
  done
done
python3 -c "print(f'ceiling: bare/raw {${rate[bare_plain]}/${rate[raw]}:.2f}x (CPU per event {${cpu[bare_plain]}/${cpu[raw]}:.2f}x the reference)')"
if [[ -n ${rate[bare_hot]:-} ]]; then
  python3 -c "print(f'hot ceiling: bare hot/raw {${rate[bare_hot]}/${rate[raw]}:.2f}x (CPU per event {${cpu[bare_hot]}/${cpu[raw]}:.2f}x the reference); bare hot/bare {${rate[bare_hot]}/${rate[bare_plain]}:.2f}x')"
fi

# The same ratios round by round (each case against the raw publisher of its own round, minutes
# apart at most) and their median: steadier than the best rates' ratio when the machine's
# speed drifts between rounds.
if (( rounds > 1 )); then
  cases=()
  for v in "${!idems[@]}"; do cases+=("relay_${names[$v]}"); done
  for variant in $bare_variants; do cases+=("bare_$variant"); done
  for c in "${cases[@]}"; do
    python3 -c "
import statistics
raw = [float(x) for x in '${by_round[raw]}'.split()]
case = [float(x) for x in '${by_round[$c]}'.split()]
ratios = [c / r for c, r in zip(case, raw)]
print('per round ${c}/raw: ' + ' '.join(f'{x:.2f}x' for x in ratios) + f', median {statistics.median(ratios):.2f}x')"
  done
  for v in "${!idems[@]}"; do
    c="relay_${names[$v]}"
    for mix in $mixes; do
      [[ $mix == unkeyed ]] && continue
      python3 -c "
import statistics
unkeyed = [float(x) for x in '${by_round[$c]}'.split()]
keyed = [float(x) for x in '${by_round[${c}_$mix]}'.split()]
ratios = [k / u for k, u in zip(keyed, unkeyed)]
print('per round ${c} $mix/unkeyed: ' + ' '.join(f'{x:.2f}x' for x in ratios) + f', median {statistics.median(ratios):.2f}x')"
    done
  done
fi

for v in "${!idems[@]}"; do
  name=${names[$v]}
  echo "== relay $name: commit-to-consume latency at 1000 events/s for ${latency_seconds}s (relay idle, LISTEN/NOTIFY)"
  $bench stream "$nats" "L${name^^}" "l$name.>"
  "${idems[$v]}" relay --db "postgresql://postgres@127.0.0.1:$pg_port/bench_$name" --nats "$nats" \
    --stream "L${name^^}" >"$dir/relay.log" 2>&1 &
  relay_pid=$!
  sleep 1
  r0=$(proc_ticks "$relay_pid")
  sleep 2
  echo "idle relay: $(( ($(proc_ticks "$relay_pid") - r0) * tick_us / 2000 )) ms CPU per second"
  $bench latency "host=127.0.0.1 port=$pg_port user=postgres dbname=bench_$name" "$nats" \
    "l$name.latency" 1000 "$latency_seconds"
  stop_relay
done
