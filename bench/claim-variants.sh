#!/usr/bin/env bash
# Where idem.inbox_claim's time goes beyond the bare insert: the generated claim (schema version
# 7) against copies of it with one part taken out, each through pgbench on one throwaway server
# (fsync off), alternating with the bare INSERT ... ON CONFLICT DO NOTHING it is compared with:
#   claim        idem.inbox_claim as installed
#   claim_noset  without the function's SET plan_cache_mode = force_generic_plan
#   claim_noret  without the retention lookup in each day's statement (idem.inbox_consumers)
#   claim_nomd5  with hashtext instead of md5 for the slot hash
# The copies answer wrongly in the cases they leave out (another retention; slots of claims made
# by the real function): they are for timing only, in a database made for it. Prints tps per
# case and each ratio to the bare insert, ROUNDS rounds at 1 and 8 clients.
#
#   bench/claim-variants.sh              4 s per case, 2 rounds
#   BENCH_SECONDS=10 BENCH_ROUNDS=3 SKIP_BUILD=1 bench/claim-variants.sh
#
# Uses build/release (built unless SKIP_BUILD=1). Not part of the test command.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${BENCH_SECONDS:-4}
rounds=${BENCH_ROUNDS:-2}

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
start_postgres "$dir/pg" >/dev/null
url="postgresql://postgres@127.0.0.1:$pg_port/bench"
psql=("$pg_bin/psql" -q -X -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$pg_port" -U postgres -d bench)
"${BENCH_IDEM:-build/release/idem}" migrate --store "$url" >/dev/null
# As in worker-bench.sh: 310,000 claims over the 60 day partitions of a 30-day retention.
"${psql[@]}" <<'SQL'
CREATE TABLE raw_inbox (consumer text NOT NULL, message_id text NOT NULL,
                        claimed_at timestamptz NOT NULL DEFAULT now(),
                        PRIMARY KEY (consumer, message_id));
SELECT count(*) FROM (
  SELECT idem.inbox_ensure_partition(((now() AT TIME ZONE 'UTC')::date) + d)
    FROM generate_series(0, 61) d) p \g /dev/null
INSERT INTO idem.inbox (consumer, message_id, expires_on)
SELECT 'bench', 'old-' || g, ((now() AT TIME ZONE 'UTC')::date) + (g % 60)
  FROM generate_series(1, 310000) g;
INSERT INTO raw_inbox (consumer, message_id) SELECT 'bench', 'old-' || g
  FROM generate_series(1, 310000) g;
VACUUM ANALYZE;
SQL
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
    sys.exit("claim-variants: the generated claim no longer has the parts this script takes "
             "out (SET %d, retention lookups %d, md5 %d)" % (n1, n2, n3))
open(d + "/variants.sql", "w").write(noset + ";\n" + noret + ";\n" + nomd5 + ";\n")
PY
"${psql[@]}" -f "$dir/variants.sql"

cases=(raw claim claim_noset claim_noret claim_nomd5)
for c in "${cases[@]}"; do
  if [[ $c == raw ]]; then
    stmt="INSERT INTO raw_inbox (consumer, message_id) VALUES ('bench', :client_id || '-' || :k) ON CONFLICT DO NOTHING;"
  else
    stmt="SELECT idem.inbox_$c('bench', :client_id || '-' || :k);"
  fi
  printf '%s\n%s\n' '\set k random(1, 1000000000000000)' "$stmt" >"$dir/$c.sql"
done
tps() {  # case clients
  "$pg_bin/pgbench" -n -M prepared -h 127.0.0.1 -p "$pg_port" -U postgres -c "$2" -j "$2" \
    -T "$seconds" -f "$dir/$1.sql" bench 2>/dev/null | awk '/^tps = / {print int($3)}'
}
for round in $(seq 1 "$rounds"); do
  for clients in 1 8; do
    line="round $round, $clients client(s):"
    raw=$(tps raw "$clients")
    line+=" raw $raw/s"
    for c in "${cases[@]:1}"; do
      t=$(tps "$c" "$clients")
      line+="; $c $t/s ($(python3 -c "print(f'{$t/$raw:.2f}x')"))"
    done
    echo "$line"
  done
done
