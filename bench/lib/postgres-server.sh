# Sourced by the benchmarks and scripts/payments-demo.sh: starts a throwaway PostgreSQL 15
# server, as the tests start it (initdb in a temp dir, a free loopback port, fsync off; as the
# postgres user when root).
#
#   start_postgres DIR [DB] sets pg_port and pg_pid; creates the database DB (default "bench").
#                           DIR's parent must be traversable by the postgres user (mode 711 or
#                           wider). The array pg_server_options, if set, adds server options
#                           (e.g. -c shared_preload_libraries=pg_stat_statements)
#   stop_postgres           fast shutdown (SIGINT) of the server started above
#   free_port               prints a loopback TCP port nothing listens on (bash only)
pg_bin=/usr/lib/postgresql/15/bin

free_port() {
  local port
  for _ in $(seq 100); do
    port=$((20000 + RANDOM % 40000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "$port"
      return 0
    fi
  done
  echo "free_port: no free loopback port found" >&2
  return 1
}

start_postgres() {
  local dir=$1 database=${2:-bench} as_pg=()
  mkdir -p "$dir"
  chmod 755 "$dir"
  mkdir -m 700 "$dir/data"
  mkdir -m 755 "$dir/sock"
  if [[ $(id -u) -eq 0 ]]; then
    chown postgres: "$dir/data" "$dir/sock"
    as_pg=(setpriv --reuid=postgres --regid=postgres --init-groups --)  # exec, no fork
  fi
  "${as_pg[@]}" "$pg_bin/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 --locale=C \
    --no-sync >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; return 1; }
  # A port found free can be taken before the server binds it (the tests' own servers and
  # their clients pick ports too): a server that exits while starting is started again on
  # another port, up to three times. Each start may take 60 s on a loaded machine.
  local attempt
  for attempt in 1 2 3; do
    pg_port=$(free_port)
    "${as_pg[@]}" "$pg_bin/postgres" -D "$dir/data" -p "$pg_port" -k "$dir/sock" \
      -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=100 \
      ${pg_server_options[@]+"${pg_server_options[@]}"} >"$dir/postgres.log" 2>&1 &
    pg_pid=$!
    for _ in $(seq 600); do
      kill -0 "$pg_pid" 2>/dev/null || break  # before the probe: another server may own the port
      if "$pg_bin/pg_isready" -q -h 127.0.0.1 -p "$pg_port" && kill -0 "$pg_pid" 2>/dev/null; then
        "$pg_bin/psql" -q -h 127.0.0.1 -p "$pg_port" -U postgres \
          -c "CREATE DATABASE $database" postgres
        return
      fi
      sleep 0.1
    done
    echo "start_postgres: the server on port $pg_port did not come up (attempt $attempt of 3):" >&2
    tail -n 20 "$dir/postgres.log" >&2
    stop_postgres
  done
  return 1
}

stop_postgres() {
  [[ -n ${pg_pid:-} ]] || return 0
  kill -INT "$pg_pid" 2>/dev/null || true
  wait "$pg_pid" 2>/dev/null || true
  pg_pid=
}
