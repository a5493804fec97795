#!/usr/bin/env bash
# Bytes per stored record against its payload, for the memory and the SQLite store, with
# 256-byte and 4 KiB response bodies (100,000 records each; RECORDS=N to change). The memory
# store is measured by the growth of the process's resident memory; SQLite's records live in
# its file, so both its RSS growth and its file growth (database + WAL) are printed. The aim
# (the gateway speed issue): at most 2 x payload + 200 bytes. About 30 s. Not part of the test
# command.
set -euo pipefail
cd "$(dirname "$0")/.."
records=${RECORDS:-100000}
if [[ ${SKIP_BUILD:-0} != 1 ]]; then
  scripts/install-deps.sh
  cmake --preset release >/dev/null
  cmake --build build/release --target idem_record_memory_bench -j2 >/dev/null
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for body in 256 4096; do
  build/release/bench/idem_record_memory_bench memory "$records" "$body"
  build/release/bench/idem_record_memory_bench "sqlite:$dir/records.db" "$records" "$body"
done
