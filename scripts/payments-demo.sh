#!/usr/bin/env bash
# The payments example, all three layers, on throwaway servers in a temp dir: PostgreSQL 15,
# nats-server -js, then `idem relay`, the payments service (examples/payments), `idem gateway`
# in front of it, and the payments consumer. A payment through the gateway is recorded, written
# to the ledger and enqueued in the outbox in one transaction; the relay publishes the event to
# the stream PAYMENTS; the consumer settles it once.
#
#   scripts/payments-demo.sh          run the demonstration, then serve on 127.0.0.1:8080
#                                     until Ctrl-C
#   scripts/payments-demo.sh --once   run the demonstration and its checks, then stop; exits 0
#                                     when every effect landed exactly once, 1 otherwise
#
# The demonstration makes three payments, retries one with the same Idempotency-Key (the
# gateway replays it), and provokes two crashes with the test-only crash points: the relay is
# killed (SIGKILL) after publishing and before marking, and the consumer after its COMMIT and
# before its ack. Both restart; the republished event is dropped by the stream's dedup window,
# the redelivered one by the consumer's inbox. It then checks the end state: balances, one
# ledger entry, one outbox row, one stream message and one settlement per payment.
#
# Environment: PAYMENTS_LISTEN (the gateway, HOST:PORT; default 127.0.0.1:8080, with --once a
# free port; port 0 picks one). Every other server listens on a free loopback port. Everything
# is stopped by PID on exit and the temp dir removed (its logs are printed first if a check
# failed).
set -euo pipefail
cd "$(dirname "$0")/.."

once=false
case "${1:-}" in
  --once) once=true ;;
  "") ;;
  -h | --help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "scripts/payments-demo.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
esac

scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release --target idem payments_service payments_consumer >/dev/null

bin=build/release
default_listen=127.0.0.1:8080
$once && default_listen=127.0.0.1:0
listen=${PAYMENTS_LISTEN:-$default_listen}
work=$(mktemp -d -t idem-payments.XXXXXX)
chmod 711 "$work"  # the postgres user must reach its data directory inside
source bench/lib/postgres-server.sh

nats_pid="" relay_pid="" consumer_pid="" service_pid="" gateway_pid=""
failed=false
stop_pid() {  # SIGTERM, up to 15 s to finish, then SIGKILL
  local pid=$1
  [[ -n $pid ]] || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 150); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
cleanup() {
  local status=$?
  set +e
  stop_pid "$gateway_pid"
  stop_pid "$service_pid"
  stop_pid "$consumer_pid"
  stop_pid "$relay_pid"
  stop_pid "$nats_pid"
  stop_postgres
  if $failed || ((status != 0 && status != 130 && status != 143)); then  # not Ctrl-C/SIGTERM
    shopt -s nullglob
    for log in "$work"/*.log "$work"/pg/*.log; do
      echo "--- $(basename "$log") (last 20 lines)" >&2
      tail -n 20 "$log" >&2
    done
  fi
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

fail() {
  echo "scripts/payments-demo.sh: $*" >&2
  failed=true
  exit 1
}

source bench/lib/address-after.sh

# Waits up to $1 seconds for the command after it to succeed.
wait_for() {
  local seconds=$1
  shift
  for _ in $(seq $((seconds * 10))); do
    "$@" && return 0
    sleep 0.1
  done
  "$@"
}

# Starts "$@" in the background with its output in log $2, through a watcher subshell that
# notes its exit status in $work/$1.exit (so a process killed on purpose is not reported by the
# shell as a failed job); sets spawned_pid to the process's own PID.
spawn() {
  local name=$1 log=$2
  shift 2
  rm -f "$work/$name.pid" "$work/$name.exit"
  ( "$@" >"$log" 2>&1 &
    echo $! >"$work/$name.pid"
    status=0
    wait $! || status=$?
    echo "$status" >"$work/$name.exit" ) 2>/dev/null &
  wait_for 10 test -s "$work/$name.pid" || fail "$name did not start"
  spawned_pid=$(cat "$work/$name.pid")
}

# Waits (up to 20 s) for the process spawned as $1 to exit by itself; prints its exit status
# (137: killed by SIGKILL).
exit_status() {
  wait_for 20 test -s "$work/$1.exit" || { echo timeout; return 0; }
  cat "$work/$1.exit"
}

echo "== starting PostgreSQL and nats-server -js in $work"
start_postgres "$work/pg" payments >/dev/null
db="postgresql://postgres@127.0.0.1:$pg_port/payments"
sql() { "$pg_bin/psql" -qtAX -h 127.0.0.1 -p "$pg_port" -U postgres payments -c "$1"; }
balance() { sql "SELECT idem.ledger_balance('$1')"; }
count() { sql "SELECT count(*) FROM $1 WHERE $2"; }  # table, condition

nats-server -js -a 127.0.0.1 -p -1 -m -1 --ports_file_dir "$work" -sd "$work/nats" \
  >"$work/nats.log" 2>&1 &
nats_pid=$!
wait_for 20 bash -c "ls '$work'/*.ports >/dev/null 2>&1 && grep -q monitoring '$work'/*.ports" ||
  fail "nats-server did not start"
nats=$(grep -o 'nats://[0-9.]*:[0-9]*' "$work"/*.ports | head -1)
monitor=$(grep -o 'http://[0-9.]*:[0-9]*' "$work"/*.ports | head -1)
# A JetStream figure from the monitoring endpoint: the first integer field named $1 of /jsz.
jsz() {
  curl -sS "$monitor/jsz?consumers=true" | grep -o "\"$1\": *[0-9]*" | head -1 | grep -o '[0-9]*$'
}

"$bin/idem" migrate --store "$db" >"$work/migrate.log" 2>&1 || fail "idem migrate failed"

relays=0
start_relay() {  # $1: extra environment (the crash point) or ""
  relays=$((relays + 1))
  local log="$work/relay-$relays.log"
  spawn "relay-$relays" "$log" env $1 "$bin/idem" relay --store "$db" --nats "$nats" \
    --create-stream PAYMENTS --subjects 'payments.>' --duplicate-window 2m --claim-lease 2s \
    --poll-interval 500ms --admin-listen 127.0.0.1:0
  relay_pid=$spawned_pid
  relay_admin=$(address_after "$log" "admin on" "$relay_pid")
}
consumers=0
start_consumer() {  # $1: extra environment (the crash point) or ""
  consumers=$((consumers + 1))
  local log="$work/consumer-$consumers.log"
  # Ack wait 2 s (set when the durable consumer is created): a message whose ack was lost
  # comes back after 2 s rather than the default 30.
  spawn "consumer-$consumers" "$log" env $1 "$bin/payments_consumer" "$nats" "$db" PAYMENTS \
    settlement 2
  consumer_pid=$spawned_pid
  wait_for 20 grep -q "pulling from" "$log" || fail "the consumer did not start pulling"
}

echo "== starting idem relay (crash point: killed after publishing, before marking)"
start_relay IDEM_TEST_CRASH_POINT=relay.after_publish
echo "== starting the payments consumer (crash point: killed after COMMIT, before the ack)"
start_consumer IDEM_TEST_CRASH_POINT=runtime.after_commit

"$bin/payments_service" "$db" 127.0.0.1:0 >"$work/service.log" 2>&1 &
service_pid=$!
service=$(address_after "$work/service.log" "listening on" "$service_pid")

cat >"$work/gateway.toml" <<'TOML'
[[route]]
method = "POST"
path_prefix = "/v1/payments"
key = "required"
lease = "30s"
fail_open = false

[[route]]
path_prefix = "/"
key = "off"
TOML
"$bin/idem" gateway --listen "$listen" --admin-listen 127.0.0.1:0 --upstream "http://$service" \
  --store "$db" --config "$work/gateway.toml" >"$work/gateway.log" 2>&1 &
gateway_pid=$!
gateway=$(address_after "$work/gateway.log" "gateway on" "$gateway_pid")
echo "   gateway http://$gateway -> service http://$service; relay admin http://$relay_admin"

run=$(date +%s)-$RANDOM
pay() {  # key account amount: prints "STATUS REPLAYED BODY"
  curl -sS -i -X POST "http://$gateway/v1/payments" -H "Idempotency-Key: $1" \
    -H 'Content-Type: application/json' -d "{\"account\": \"$2\", \"amount\": $3}" |
    tr -d '\r' | awk 'NR==1 {status=$2} tolower($1)=="idempotent-replayed:" {replayed=$2}
                      body {b=b $0} /^$/ {body=1}
                      END {print status, (replayed=="" ? "-" : replayed), b}'
}
expect_paid() {  # "STATUS REPLAYED BODY" expected-status expected-replayed
  local status replayed body
  read -r status replayed body <<<"$1"
  if [[ $replayed != true ]]; then echo "   $status $body"
  else echo "   $status Idempotent-Replayed: $replayed $body"; fi
  [[ $status == "$2" && $replayed == "$3" ]] ||
    fail "expected $2 (replayed: $3), got $status (replayed: $replayed): $body"
}

echo
echo "== payment 1: alice 250 (the service pays, records the key and enqueues the event in one"
echo "   transaction)"
first=$(pay "demo-$run-1" alice 250)
expect_paid "$first" 201 false
echo "== payment 1 again, same Idempotency-Key (a client retry): the gateway replays it"
again=$(pay "demo-$run-1" alice 250)
expect_paid "$again" 201 true
[[ ${again#* * } == "${first#* * }" ]] || fail "the replay's body differs from the original"

echo "== the relay publishes event 1 and is killed before marking it; the consumer settles it"
echo "   and is killed before acking it"
[[ $(exit_status relay-1) == 137 ]] || fail "the relay did not die at its crash point"
relay_pid=""
[[ $(exit_status consumer-1) == 137 ]] || fail "the consumer did not die at its crash point"
consumer_pid=""
echo "   outbox row state: $(sql "SELECT state FROM idem.outbox") (0: not marked published)," \
  "stream messages: $(jsz messages), settled:alice = $(balance settled:alice)"

echo "== both restart: the relay republishes event 1 (the stream drops the copy), the consumer"
echo "   gets event 1 again after the ack wait (its inbox skips it)"
start_relay ""
start_consumer ""

echo "== payment 2: alice 100; payment 3: bob 70"
expect_paid "$(pay "demo-$run-2" alice 100)" 201 false
expect_paid "$(pay "demo-$run-3" bob 70)" 201 false

# Settled: every row marked, the stream's 3 messages and the redelivery all acked.
settled() {
  [[ $(sql "SELECT count(*) FROM idem.outbox WHERE state = 1") == 3 ]] &&
    [[ $(jsz num_ack_pending) == 0 && $(jsz num_pending) == 0 ]] &&
    [[ $(jsz consumer_seq) -ge 4 ]]
}
wait_for 30 settled || fail "the events did not settle within 30 s"
relay_metric() {
  curl -sS "http://$relay_admin/metrics" | awk -v m="$1" '$1 == m {print $2}'
}
relay_duplicates=$(relay_metric idem_relay_duplicates_total)
relay_published=$(relay_metric idem_relay_published_total)
stop_pid "$consumer_pid"
consumer_pid=""
consumer_line=$(grep "stopped:" "$work/consumer-$consumers.log" || true)
$once || start_consumer ""  # serve on

echo
echo "== end state"
check() {  # description actual expected
  local mark=ok
  [[ $2 == "$3" ]] || { mark=WRONG; failed=true; }
  [[ $mark == ok ]] || mark="WRONG, expected $3"
  printf '   %-62s %8s  %s\n' "$1" "$2" "$mark"
}
check "wallet:alice balance (service ledger)" "$(balance wallet:alice)" 350
check "wallet:bob balance" "$(balance wallet:bob)" 70
check "payment ledger entries" "$(count idem.ledger "txn_id LIKE 'payment:%'")" 3
check "payments rows" "$(count payments true)" 3
check "outbox events, all published" "$(count idem.outbox "state = 1")" 3
check "outbox events marked as a broker duplicate (the relay crash)" \
  "$(count idem.outbox duplicate)" 1
check "relay: PubAcks with duplicate: true" "$relay_duplicates" 1
check "relay: rows marked published after its restart" "$relay_published" 3
check "messages in stream PAYMENTS" "$(jsz messages)" 3
check "settled:alice balance (consumer ledger)" "$(balance settled:alice)" 350
check "settled:bob balance" "$(balance settled:bob)" 70
check "settlement ledger entries" "$(count idem.ledger "txn_id LIKE 'settle:%'")" 3
check "payments in state settled" \
  "$(count idem.states "kind = 'payment' AND state = 'settled'")" 3
check "inbox claims keyed by the outbox event id (Nats-Msg-Id)" \
  "$(sql "SELECT count(*) FROM idem.inbox i JOIN idem.outbox o ON o.event_id = i.message_id")" 3
check "consumer after restart (the redelivery skipped by the inbox)" \
  "$(grep -o 'applied [0-9]* duplicates [0-9]*' <<<"$consumer_line")" "applied 2 duplicates 1"
check "service: payments executed, replayed from its own record" \
  "$(curl -sS "http://$service/v1/stats" |
    grep -o '"executed":[0-9]*,"fenced":[0-9]*,"replayed":[0-9]*')" \
  '"executed":3,"fenced":0,"replayed":0'
$failed && fail "the end state is wrong (above)"
echo "   every effect landed exactly once"

if $once; then exit 0; fi
cat <<INFO

The payments example is serving: idem gateway on http://$gateway in front of the payments
service (http://$service), PostgreSQL on 127.0.0.1:$pg_port (database payments, user postgres),
nats-server on $nats, the relay's metrics on http://$relay_admin/metrics. Pay, then look:

  curl -i -X POST http://$gateway/v1/payments -H 'Idempotency-Key: try-$run' -H 'Content-Type: application/json' -d '{"account": "carol", "amount": 40}'
  curl http://$service/v1/balances/carol
  $pg_bin/psql -h 127.0.0.1 -p $pg_port -U postgres payments -c "SELECT event_id, state, stream_seq FROM idem.outbox"
  $pg_bin/psql -h 127.0.0.1 -p $pg_port -U postgres payments -c "SELECT idem.ledger_balance('settled:carol')"

Serving until Ctrl-C (everything is stopped and the temp dir removed).
INFO
wait "$gateway_pid"
