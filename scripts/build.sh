#!/usr/bin/env bash
# Configures and builds one CMake preset (release, debug, asan, tsan, thread-safety):
# scripts/build.sh PRESET [TARGET...]   (no target: everything the preset's tests need)
#
# Compiles go through ccache when it is installed (scripts/install-deps.sh installs it). The
# settings below let a fresh clone in another folder reuse what an earlier clone compiled: paths
# under the clone are hashed relative to it (base_dir), the working directory is left out of the
# hash, and CMakeLists.txt maps the clone's path out of the objects (-ffile-prefix-map), so the
# debug info is the same whichever folder the clone is in. Unity sources include their members by
# absolute path; those compiles hit in ccache's preprocessor mode.
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-release}
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-10G}
cmake --preset "$preset" >/dev/null
targets=()
(($# > 1)) && targets=(--target "${@:2}")
cmake --build --preset "$preset" "${targets[@]}" -- -j"$(nproc)"
