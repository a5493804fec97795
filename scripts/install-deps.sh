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
  # the Debian package and its tests (scripts/package.sh, tests labelled package and deploy):
  # dpkg-shlibdeps, lintian, systemd-analyze, promtool (in the prometheus package), and
  # python3 to read the alert rules and the dashboard in the metrics check
  dpkg-dev fakeroot lintian systemd prometheus python3 python3-yaml
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
# promtool comes with the Prometheus server, which its package starts where systemd runs: it
# would take port 9090 (scripts/run.sh's admin port). Only promtool is needed here.
if [[ " ${missing[*]} " == *" prometheus "* && -d /run/systemd/system ]]; then
  echo "idem: stopping and disabling the prometheus service its package started (only promtool is used)" >&2
  "${sudo_cmd[@]}" systemctl disable --now prometheus.service >/dev/null 2>&1 || true
fi
