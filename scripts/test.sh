#!/usr/bin/env bash
# README command two: install dependencies, check the lock annotations with clang's
# thread-safety analysis (a compile-only stage), then build and run the test suite three times:
# a release build (every test), under AddressSanitizer + UndefinedBehaviorSanitizer, and under
# ThreadSanitizer. Stops at the first failing stage. The release stage also builds, installs,
# runs and purges the Debian package (label package: needs root, skipped otherwise).
#
# The ThreadSanitizer stage leaves out the long chaos run (label chaos: minutes of process kills,
# under TSan about five): its processes are the same binaries the end-to-end tests run under
# TSan, and its short in-process counterpart (idem_chaos_pipeline_tests) still runs there. Both
# sanitizer stages leave out the examples in other languages (label examples): the idem
# binaries they start are the payments end-to-end tests', and no sanitizer sees their own code.
# docs/testing.md says what each stage runs and why.
#
# Each step reports its time against a budget (cold: no compiler cache yet; warm: a second run),
# and each test stage its ten slowest tests, so a slow change shows in its own log. A step over
# budget is reported, not failed: these machines are noisy.
#
#   scripts/test.sh                                 all four stages
#   IDEM_TEST_STAGES="release" scripts/test.sh      only some of them
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}

# A warm run is one whose compiler cache already holds objects (a second clone on one machine).
warmth=cold
if command -v ccache >/dev/null &&
  (($(ccache --print-stats 2>/dev/null | awk '$1 == "files_in_cache" {print $2}') + 0 > 100)); then
  warmth=warm
fi

# Budgets in seconds, cold and warm, measured on two cores (docs/testing.md has the figures).
# A test stage takes as long with either cache: its budget is the same in both.
declare -A budget_cold=(
  [thread-safety-build]=150 [release-build]=420 [release-tests]=600 [release-demos]=60
  [asan-build]=600 [asan-tests]=900 [tsan-build]=420 [tsan-tests]=660)
declare -A budget_warm=(
  [thread-safety-build]=60 [release-build]=180 [release-tests]=600 [release-demos]=60
  [asan-build]=300 [asan-tests]=900 [tsan-build]=180 [tsan-tests]=660)

# Tests at twice the cores: most of a test's time is spent waiting on servers, sockets and
# timers, so two per core keep the cores busy (on two cores: the release tests in 160 s instead
# of 350 at -j2, every test still passing; docs/testing.md).
jobs=${IDEM_TEST_JOBS:-$(($(nproc) * 2))}

summary=()
step_started=$SECONDS
# took STEP: reports how long STEP took against its budget, and keeps the line for the summary.
took() {
  local seconds=$((SECONDS - step_started)) budget verdict
  step_started=$SECONDS
  if [[ $warmth == warm ]]; then budget=${budget_warm[$1]:-}; else budget=${budget_cold[$1]:-}; fi
  verdict=""
  if [[ -n $budget ]]; then
    verdict="(budget $budget s, $warmth cache)"
    ((seconds > budget)) && verdict="OVER BUDGET: $seconds s against $budget s ($warmth cache)"
  fi
  local line
  line=$(printf '%-22s %5d s  %s' "$1" "$seconds" "$verdict")
  summary+=("$line")
  echo "=== idem tests: $line ==="
}
took installing-dependencies
# The summary, also when a stage fails and the run stops there.
print_summary() {
  echo "=== idem tests: summary ($warmth compiler cache; $SECONDS s in all) ==="
  printf '%s\n' "${summary[@]}"
}
trap print_summary EXIT

# slowest LOG: the ten slowest tests of a ctest run, from its log.
slowest() {
  sed -nE 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+)( +# [^.]*)? [ .*]+(Passed|\*\*\*[A-Za-z]+|Failed) +([0-9.]+) sec.*/\4 \1/p' "$1" |
    sort -rn | awk 'NR <= 10 {printf "  %8.1f s  %s\n", $1, $2}'
  # (awk reads to the end: `head` would close the pipe early, and pipefail would take sort's
  # SIGPIPE for a failure of the run)
}

for stage in ${IDEM_TEST_STAGES:-thread-safety release asan tsan}; do
  echo "=== idem tests: $stage build ==="
  build_log=$(mktemp)
  scripts/build.sh "$stage" 2>&1 | tee "$build_log"
  warnings=$(grep -c "warning:" "$build_log" || true)
  rm -f "$build_log"
  took "$stage-build"
  # The build is kept free of warnings; a new one shows in the summary of the change that made it.
  ((warnings == 0)) || summary+=("$(printf '%-22s %5d compiler warnings: the build should have none' "$stage-build" "$warnings")")
  # clang -Wthread-safety -Werror=thread-safety over the libraries, the tool and the examples:
  # the build is the check (docs/architecture.md, "Locks and the thread-safety analysis").
  [[ $stage == thread-safety ]] && continue
  # The Debian package (label package) is built from the release build only: a package of a
  # sanitizer build is not what anyone installs. No sanitizer sees the examples' Python, Go and
  # Node code, and the idem binaries they start run under both in the payments e2e tests.
  excluded=()
  [[ $stage == asan ]] && excluded=(--label-exclude '^(examples|package)$')
  [[ $stage == tsan ]] && excluded=(--label-exclude '^(chaos|examples|package)$')
  log=build/$stage/ctest-run.log
  status=0
  ctest --preset "$stage" -j"$jobs" "${excluded[@]}" 2>&1 | tee "$log" || status=$?
  echo "=== idem tests: the ten slowest $stage tests ==="
  slowest "$log"
  took "$stage-tests"
  ((status == 0)) || exit "$status"
  if [[ $stage == release ]]; then
    echo "=== idem tests: README command one (scripts/run.sh --once) ==="
    IDEM_LISTEN=127.0.0.1:0 IDEM_ADMIN_LISTEN=127.0.0.1:0 IDEM_SERVICE_LISTEN=127.0.0.1:0 \
      IDEM_STORE="sqlite:build/release/run-smoke.db" scripts/run.sh --once
    echo "=== idem tests: all three layers (scripts/payments-demo.sh --once) ==="
    scripts/payments-demo.sh --once
    took release-demos
  fi
done

