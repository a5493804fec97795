#!/usr/bin/env bash
# The PostgreSQL store against pgbench running the same two calls, on one throwaway server.
#
#   bench/postgres-bench.sh              build release, 10 s per run at 1, 2 and 8 clients
#   BENCH_SECONDS=5 bench/postgres-bench.sh
#
# For each concurrency it prints the store's begin+complete pairs/s (idem_postgres_bench:
# through the Store interface, pooled connections, prepared statements, server clock), then
# pgbench's transactions/s for a script doing the same two statements (SELECT idem_begin(...);
# SELECT idem_complete(...)) in prepared mode, and the ratio. The ratio is the overhead of the
# C++ client (pool, encoding, decoding) over the bare protocol; the SQL work is identical.
# Not part of the test command.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${BENCH_SECONDS:-10}

if [[ ${SKIP_BUILD:-0} != 1 ]]; then
  scripts/install-deps.sh
  cmake --preset release >/dev/null
  cmake --build build/release --target idem_postgres_bench -j2 >/dev/null
fi

# --- a throwaway server, as the tests start it ------------------------------------------------
source bench/lib/postgres-server.sh
dir=$(mktemp -d)
chmod 711 "$dir"  # the server runs as the postgres user when this script runs as root
cleanup() {
  stop_postgres
  rm -rf "$dir"
}
trap cleanup EXIT
start_postgres "$dir/pg"
port=$pg_port
bin=$pg_bin

url="postgresql://postgres@127.0.0.1:$port/bench"

# The same two statements as the store, with a fresh scope per transaction.
cat >"$dir/pair.sql" <<'SQL'
\set k random(1, 1000000000000000)
SELECT o_token AS token FROM idem_begin(sha256(('bench-' || :client_id || '-' || :k)::bytea), 'bench', '', :client_id || '-' || :k, '\x00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff'::bytea, 30000, 86400000, NULL) \gset
SELECT idem_complete(sha256(('bench-' || :client_id || '-' || :k)::bytea), :token, '\x000000c900000026000000000c436f6e74656e742d54797065000000106170706c69636174696f6e2f6a736f6e7b226964223a227061795f31222c22616d6f756e74223a313030307d'::bytea, 86400000, NULL);
SQL

build/release/bench/idem_postgres_bench "$url" 1 1 >/dev/null  # creates the schema, warms up
printf '%-8s %14s %14s %7s\n' clients store_pairs/s pgbench_tps ratio
for clients in 1 2 8; do
  store=$(build/release/bench/idem_postgres_bench "$url?pool_size=$clients" "$clients" "$seconds" |
          awk '{print $2}')
  pg=$("$bin/pgbench" -n -M prepared -h 127.0.0.1 -p "$port" -U postgres -c "$clients" \
         -j "$clients" -T "$seconds" -f "$dir/pair.sql" bench 2>/dev/null |
       awk '/^tps = / {print int($3)}')
  ratio=$(python3 -c "print(f'{$store/$pg:.2f}')")
  printf '%-8s %14s %14s %7s\n' "$clients" "$store" "$pg" "${ratio}x"
done
