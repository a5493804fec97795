#!/usr/bin/env bash
# The worker layer's SQL building blocks against the bare statement they replace, through
# pgbench on one throwaway server (fsync off).
#
#   bench/worker-bench.sh                 build, then 10 s per run at 1, 2 and 8 clients
#   BENCH_SECONDS=5 CLIENTS="1 4" bench/worker-bench.sh
#   BENCH_CLAIM_VARIANTS=1 BENCH_ROUNDS=3 CLIENTS="1 8" bench/worker-bench.sh   and the claim's parts
#
# Per concurrency, six pgbench runs (prepared mode, one statement per transaction, a fresh
# message / txn id each time):
#   raw inbox   INSERT INTO raw_inbox ... ON CONFLICT DO NOTHING   (one unique index)
#   claim       SELECT idem.inbox_claim('bench', id)                (lock, probe, insert)
#   bare claim  the cheapest statement that does what inbox_claim must: the pair's lock, then an
#               insert into its day's partition unless the pair is in the older partition, in
#               one plain SQL statement naming both partitions (no function, no slot hash, no
#               retention lookup, no checks): a ceiling for any claim with this retention
#   raw ledger  INSERT INTO raw_ledger ... ON CONFLICT DO NOTHING
#   append      SELECT idem.ledger_append(account, id, 1)           (entry + balance upsert)
#   bare append the cheapest statement that does what ledger_append must: the entry inserted
#               unless its txn id is there, and the balance upserted from what was inserted, in
#               one plain SQL statement (no function, no checks): a ceiling for any append
# and the ratios claim/raw inbox, bare claim/raw inbox, append/raw ledger and bare append/raw
# ledger (1.00x = as fast as the bare insert).
# Both inboxes start with 310,000 claims; idem.inbox's are spread over the 60 day partitions a
# 30-day retention keeps in steady state (BENCH_DAYS=K: a K-day retention's 2K), of which
# idem.inbox_claim probes two. Last, the per-call cost inside the server (no network) of the
# bare insert, the claim (its fast path, schema version 5) and the general path alone
# (idem.inbox_claim_full, version 4's claim). Not part of the test command.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${BENCH_SECONDS:-10}
clients_list=${CLIENTS:-1 2 8}

if [[ ${SKIP_BUILD:-0} != 1 ]]; then
  scripts/install-deps.sh
  cmake --preset release >/dev/null
  cmake --build build/release --target idem -j2 >/dev/null
fi

source bench/lib/postgres-server.sh
dir=$(mktemp -d)
chmod 711 "$dir"
cleanup() {
  stop_postgres
  rm -rf "$dir"
}
trap cleanup EXIT
start_postgres "$dir/pg"
port=$pg_port
bin=$pg_bin
url="postgresql://postgres@127.0.0.1:$port/bench"
psql=("$bin/psql" -q -X -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres -d bench)

idem=${BENCH_IDEM:-build/release/idem}  # BENCH_IDEM: another build's idem, to compare
"$idem" migrate --store "$url" >/dev/null
days=${BENCH_DAYS:-30}
"${psql[@]}" -v days="$days" <<'SQL'
CREATE TABLE raw_inbox (consumer text NOT NULL, message_id text NOT NULL,
                        claimed_at timestamptz NOT NULL DEFAULT now(),
                        PRIMARY KEY (consumer, message_id));
CREATE TABLE raw_ledger (txn_id text PRIMARY KEY, account text NOT NULL, amount bigint NOT NULL,
                         created_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE bare_ledger (txn_id text PRIMARY KEY, account text NOT NULL, amount bigint NOT NULL,
                          created_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE bare_balances (account text PRIMARY KEY, balance bigint NOT NULL);
SELECT count(*) AS partitions_created FROM (
  SELECT idem.inbox_ensure_partition(((now() AT TIME ZONE 'UTC')::date) + d)
    FROM generate_series(0, 2 * :days + 1) d) p \g /dev/null
INSERT INTO idem.inbox (consumer, message_id, expires_on)
SELECT 'bench', 'old-' || g, ((now() AT TIME ZONE 'UTC')::date) + (g % (2 * :days))
  FROM generate_series(1, 310000) g;
INSERT INTO raw_inbox (consumer, message_id) SELECT 'bench', 'old-' || g
  FROM generate_series(1, 310000) g;
VACUUM ANALYZE;
SQL

cat >"$dir/raw_inbox.sql" <<'SQL'
\set k random(1, 1000000000000000)
INSERT INTO raw_inbox (consumer, message_id) VALUES ('bench', :client_id || '-' || :k) ON CONFLICT DO NOTHING;
SQL
cat >"$dir/claim.sql" <<'SQL'
\set k random(1, 1000000000000000)
SELECT idem.inbox_claim('bench', :client_id || '-' || :k);
SQL
# The bare claim names the partitions of the day 45 days ahead and of 30 days before it, as a
# claim expiring then would (both exist: created above).
# Its lock key is the claim's, length(consumer) || ':' || consumer || message_id, with
# consumer 'bench'. (pgbench reads a colon before a name as a variable, even in a literal or a
# cast: the day is a literal and the key spells its colon chr(58).)
new_day=$("${psql[@]}" -At -c "SELECT to_char((now() AT TIME ZONE 'UTC')::date + 45, 'YYYY-MM-DD')")
old_day=$("${psql[@]}" -At -c "SELECT to_char((now() AT TIME ZONE 'UTC')::date + 15, 'YYYY-MM-DD')")
new_part=inbox_p${new_day//-/} old_part=inbox_p${old_day//-/}
cat >"$dir/bare_claim.sql" <<SQL
\\set k random(1, 1000000000000000)
WITH m AS MATERIALIZED (SELECT :client_id || '-' || :k AS id), l AS MATERIALIZED (SELECT pg_advisory_xact_lock(hashtextextended('5' || chr(58) || 'bench' || m.id, 6906989)) FROM m) INSERT INTO idem.$new_part (consumer, message_id, expires_on) SELECT 'bench', m.id, DATE '$new_day' FROM m, l WHERE NOT EXISTS (SELECT 1 FROM idem.$old_part o WHERE o.consumer = 'bench' AND o.message_id = m.id) ON CONFLICT DO NOTHING;
SQL
cat >"$dir/raw_ledger.sql" <<'SQL'
\set k random(1, 1000000000000000)
\set a random(1, 1000)
INSERT INTO raw_ledger (txn_id, account, amount) VALUES (:client_id || '-' || :k, 'acct-' || :a, 1) ON CONFLICT DO NOTHING;
SQL
cat >"$dir/append.sql" <<'SQL'
\set k random(1, 1000000000000000)
\set a random(1, 1000)
SELECT idem.ledger_append('acct-' || :a, :client_id || '-' || :k, 1);
SQL
cat >"$dir/bare_append.sql" <<'SQL'
\set k random(1, 1000000000000000)
\set a random(1, 1000)
WITH e AS (INSERT INTO bare_ledger (txn_id, account, amount) VALUES (:client_id || '-' || :k, 'acct-' || :a, 1) ON CONFLICT DO NOTHING RETURNING account, amount) INSERT INTO bare_balances (account, balance) SELECT account, amount FROM e ON CONFLICT (account) DO UPDATE SET balance = bare_balances.balance + excluded.balance;
SQL

tps() {  # script clients
  "$bin/pgbench" -n -M prepared -h 127.0.0.1 -p "$port" -U postgres -c "$2" -j "$2" \
    -T "$seconds" -f "$dir/$1.sql" bench 2>/dev/null | awk '/^tps = / {print int($3)}'
}

ratio() { python3 -c "print(f'{$1/$2:.2f}x')"; }
printf '%-8s %12s %10s %7s %13s %7s   %12s %10s %7s %14s %7s\n' clients raw_inbox/s claim/s \
  ratio bare_claim/s ratio raw_ledger/s append/s ratio bare_append/s ratio
for clients in $clients_list; do
  ri=$(tps raw_inbox "$clients")
  cl=$(tps claim "$clients")
  bc=$(tps bare_claim "$clients")
  rl=$(tps raw_ledger "$clients")
  ap=$(tps append "$clients")
  ba=$(tps bare_append "$clients")
  printf '%-8s %12s %10s %7s %13s %7s   %12s %10s %7s %14s %7s\n' "$clients" "$ri" "$cl" \
    "$(ratio "$cl" "$ri")" "$bc" "$(ratio "$bc" "$ri")" "$rl" "$ap" "$(ratio "$ap" "$rl")" \
    "$ba" "$(ratio "$ba" "$rl")"
done

# BENCH_CLAIM_VARIANTS=1: where the claim's time goes beyond the bare claim. Copies of the
# generated idem.inbox_claim with one part taken out each, against the bare insert in the same
# round, BENCH_ROUNDS rounds (default 2) at each concurrency:
#   claim_noset  without the function's SET plan_cache_mode = force_generic_plan
#   claim_noret  without the retention lookup in each day's statement (idem.inbox_consumers)
#   claim_nomd5  with hashtext instead of md5 for the slot hash
# The copies answer wrongly in the cases they leave out (another retention; slots of claims
# made by the real function): they are for timing only, in this throwaway database.
if [[ ${BENCH_CLAIM_VARIANTS:-0} == 1 ]]; then
  "${psql[@]}" -At -c "SELECT pg_get_functiondef('idem.inbox_claim(text,text)'::regprocedure)" \
    >"$dir/claim.def"
  python3 - "$dir" <<'PY'
import re, sys
d = sys.argv[1]
src = open(d + "/claim.def").read()
def copy(name):
    s = src.replace("FUNCTION idem.inbox_claim(", "FUNCTION idem.inbox_%s(" % name)
    return s.replace("inbox_claim.", "inbox_%s." % name)
noset, n1 = re.subn(r"\n *SET plan_cache_mode TO '?force_generic_plan'?", "", copy("claim_noset"))
noret, n2 = re.subn(r"\n\s*AND NOT EXISTS \(SELECT 1 FROM idem\.inbox_consumers c.*?"
                    r"interval '2 days'\)\)\)", "", copy("claim_noret"), flags=re.S)
md5 = "('x' || substr(md5(inbox_claim_nomd5.message_id), 1, 8))::bit(32)::integer"
nomd5 = copy("claim_nomd5")
n3 = nomd5.count(md5)
nomd5 = nomd5.replace(md5, "hashtext(inbox_claim_nomd5.message_id)")
if n1 != 1 or n2 < 1 or n3 != 1:
    sys.exit("worker-bench: the generated claim no longer has the parts the variants take "
             "out (SET %d, retention lookups %d, md5 %d)" % (n1, n2, n3))
open(d + "/variants.sql", "w").write(noset + ";\n" + noret + ";\n" + nomd5 + ";\n")
PY
  "${psql[@]}" -f "$dir/variants.sql"
  variants=(claim claim_noset claim_noret claim_nomd5)
  for v in "${variants[@]:1}"; do
    printf '%s\n%s\n' '\set k random(1, 1000000000000000)' \
      "SELECT idem.inbox_$v('bench', :client_id || '-' || :k);" >"$dir/$v.sql"
  done
  for round in $(seq 1 "${BENCH_ROUNDS:-2}"); do
    for clients in $clients_list; do
      ri=$(tps raw_inbox "$clients")
      line="claim variants, round $round, $clients client(s): raw inbox $ri/s"
      for v in "${variants[@]}"; do
        t=$(tps "$v" "$clients")
        line+="; $v $t/s ($(ratio "$t" "$ri"))"
      done
      echo "$line"
    done
  done
fi

# Per call inside the server, no network: a procedure calls the statement and COMMITs after
# each call (so each call is one transaction, as above), best of three rounds of 2,000 calls.
# Two figures: wall time, and the backend's own CPU time (from /proc/self/schedstat, read by
# the server; it moves far less than wall time when other processes share the cores).
"${psql[@]}" <<'SQL'
CREATE PROCEDURE bench_per_call(what text, n int, INOUT us numeric DEFAULT NULL,
                                INOUT cpu_us numeric DEFAULT NULL)
LANGUAGE plpgsql AS $$
DECLARE t0 timestamptz; c0 bigint; b boolean; tag text := md5(random()::text);
BEGIN
  t0 := clock_timestamp();
  c0 := split_part(pg_read_file('/proc/self/schedstat'), ' ', 1)::bigint;
  FOR i IN 1..n LOOP
    IF what = 'raw_inbox' THEN
      INSERT INTO raw_inbox (consumer, message_id) VALUES ('bench', tag || i) ON CONFLICT DO NOTHING;
    ELSIF what = 'claim_full' THEN
      b := idem.inbox_claim_full('bench', tag || i);
    ELSE
      b := idem.inbox_claim('bench', tag || i);
    END IF;
    COMMIT;
  END LOOP;
  us := round(extract(epoch FROM clock_timestamp() - t0) * 1e6 / n, 1);
  cpu_us := round((split_part(pg_read_file('/proc/self/schedstat'), ' ', 1)::bigint - c0)
                  / 1000.0 / n, 1);
END $$;
SQL
best() {  # what column(1 wall, 2 cpu)
  for _ in 1 2 3; do "${psql[@]}" -At -F ' ' -c "CALL bench_per_call('$1', 2000)"; done |
    awk -v c="$2" '{print $c}' | sort -n | head -1
}
for col in 1 2; do
  ri=$(best raw_inbox $col)
  cl=$(best claim $col)
  cf=$(best claim_full $col)
  printf 'per call in the server, %s: raw inbox %s us, claim %s us (ratio %s); general path\n' \
    "$([[ $col == 1 ]] && echo wall || echo 'backend CPU')" "$ri" "$cl" \
    "$(ratio "$ri" "$cl")"
  printf '  alone (idem.inbox_claim_full, the claim before schema version 5) %s us (ratio %s)\n' \
    "$cf" "$(ratio "$ri" "$cf")"
done
