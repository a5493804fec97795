#!/usr/bin/env bash
# Configures and builds one CMake preset (release, debug, asan, tsan, thread-safety):
# scripts/build.sh PRESET [TARGET...]   (no target: everything the preset's tests need)
#
# Compiles go through ccache when it is installed (scripts/install-deps.sh installs it), with the
# options that let a fresh clone in another folder reuse what an earlier clone compiled; they
# live in the compiler launcher (CMakeLists.txt), so any build of the tree gets them.
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-release}
export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-10G}
cmake --preset "$preset" >/dev/null
targets=()
(($# > 1)) && targets=(--target "${@:2}")
cmake --build --preset "$preset" "${targets[@]}" -- -j"$(nproc)"
