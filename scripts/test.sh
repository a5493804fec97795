#!/usr/bin/env bash
# README command two: install dependencies, check the lock annotations with clang's
# thread-safety analysis (a compile-only stage), then build and run the whole test suite three
# times: a release build, under AddressSanitizer + UndefinedBehaviorSanitizer, and under
# ThreadSanitizer. Stops at the first failing stage. The ThreadSanitizer stage leaves out the
# long chaos run (label chaos: minutes of process kills, under TSan about five): its processes
# are the same binaries the end-to-end tests run under TSan, and its short in-process
# counterpart (idem_chaos_pipeline_tests) still runs there.
#
#   scripts/test.sh                 all four stages
#   IDEM_TEST_STAGES="release" scripts/test.sh    only some of them
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}

# Each step says how long it took, so a slow stage shows in CI's log.
step_started=0  # SECONDS counts from the start of this script
took() { echo "=== idem tests: $1 took $((SECONDS - step_started)) s ==="; step_started=$SECONDS; }
took "installing dependencies"

for stage in ${IDEM_TEST_STAGES:-thread-safety release asan tsan}; do
  echo "=== idem tests: $stage build ==="
  scripts/build.sh "$stage"
  took "the $stage build"
  # clang -Wthread-safety -Werror=thread-safety over the libraries, the tool and the examples:
  # the build is the check (docs/architecture.md, "Locks and the thread-safety analysis").
  [[ $stage == thread-safety ]] && continue
  excluded=()
  [[ $stage == tsan ]] && excluded=(--label-exclude chaos)
  ctest --preset "$stage" -j"$(nproc)" "${excluded[@]}"
  took "the $stage tests"
  if [[ $stage == release ]]; then
    echo "=== idem tests: README command one (scripts/run.sh --once) ==="
    IDEM_LISTEN=127.0.0.1:0 IDEM_ADMIN_LISTEN=127.0.0.1:0 IDEM_SERVICE_LISTEN=127.0.0.1:0 \
      IDEM_STORE="sqlite:build/release/run-smoke.db" scripts/run.sh --once
    echo "=== idem tests: all three layers (scripts/payments-demo.sh --once) ==="
    scripts/payments-demo.sh --once
    took "README command one and the payments demo"
  fi
done
