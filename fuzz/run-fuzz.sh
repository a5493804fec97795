#!/usr/bin/env bash
# Builds the libFuzzer harnesses with clang-14 (ASan+UBSan) and fuzzes the gateway's request
# path. Not part of scripts/test.sh: fuzzing is open-ended; run it for as long as you like.
#
#   fuzz/run-fuzz.sh              60 seconds
#   FUZZ_SECONDS=600 fuzz/run-fuzz.sh
#   FUZZ_RUNS=10000000 FUZZ_SECONDS=0 FUZZ_PRESET=fuzz-fast fuzz/run-fuzz.sh
#                                 a long run: ten million inputs, no time limit, built -O2 with
#                                 UBSan but without ASan (several times faster; the harness's
#                                 own checks still abort on a wrong answer)
#   FUZZ_JOBS=2 ...               that many fuzzing processes side by side, sharing the corpus;
#                                 FUZZ_RUNS is the total, split evenly, and each job logs to
#                                 build/fuzz/fuzz-N.log
#   fuzz/run-fuzz.sh CRASH_FILE   re-run one input (a reproducer libFuzzer wrote)
#
# New interesting inputs go to build/fuzz/corpus (the seeds in fuzz/corpus stay as they are);
# crashes are written to build/fuzz/ as crash-<sha1>. Entropic scheduling is off: with a corpus
# of a few hundred inputs its bookkeeping took half the time of every execution.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
need=()
for p in clang-14 libclang-rt-14-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if ((${#need[@]})); then
  sudo_cmd=()
  [[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
preset=${FUZZ_PRESET:-fuzz}
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" --target request_path_fuzzer -- -j"$(nproc)"

fuzzer=build/$preset/fuzz/request_path_fuzzer
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
if (($#)); then
  exec "$fuzzer" "$@"
fi
mkdir -p build/fuzz/corpus
jobs=${FUZZ_JOBS:-1}
runs=${FUZZ_RUNS:--1}
parallel=()
if ((jobs > 1)); then
  ((runs > 0)) && runs=$(((runs + jobs - 1) / jobs))
  parallel=(-jobs="$jobs" -workers="$jobs")
fi
cd build/fuzz  # libFuzzer writes each job's log (fuzz-N.log) to the working directory
exec "../../$fuzzer" "${parallel[@]}" -max_total_time="${FUZZ_SECONDS:-60}" -runs="$runs" \
  -entropic=0 -max_len=8192 -timeout=10 -print_final_stats=1 \
  -artifact_prefix=./ corpus ../../fuzz/corpus/request_path
