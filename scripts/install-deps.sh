#!/usr/bin/env bash
# Installs idem's build and test dependencies from Debian 12's packages. Idempotent: when every
# package is already present it only checks, which takes well under a second.
set -euo pipefail

packages=(
  cmake ninja-build ccache lld g++ clang-14 pkg-config
  libboost1.81-dev libssl-dev libsqlite3-dev sqlite3
  libhiredis-dev redis-server libpq-dev postgresql
  libcli11-dev libspdlog-dev libfmt-dev nlohmann-json3-dev libtomlplusplus-dev
  libcurl4-openssl-dev curl
  libnats-dev nats-server
  libgtest-dev libgmock-dev libbenchmark-dev
  # The examples in other languages (examples/python, examples/go, examples/node) and their tests
  python3-psycopg2 golang-go golang-github-lib-pq-dev
)
# Node.js from elsewhere (NodeSource's nodejs bundles npm and conflicts with Debian's) counts.
command -v node >/dev/null || packages+=(nodejs)
command -v npm >/dev/null || packages+=(npm)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  exit 0
fi

echo "idem: installing ${missing[*]}" >&2
sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then sudo_cmd=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
