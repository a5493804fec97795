#!/usr/bin/env bash
# Builds the Debian package build/package/idem_<version>_amd64.deb: the release build of the
# idem binary (only that target), installed by CPack with the units, the config files, the SQL,
# the alert rules and the dashboard (cmake/install.cmake, cmake/package.cmake), then checked by
# lintian (errors fail; warnings are printed). docs/operations.md says how to install it.
#
#   scripts/package.sh                build, package, lintian
#   scripts/package.sh --no-lintian   build and package only
#
# Environment: IDEM_PACKAGE_DIR (default build/package) is where the .deb is written.
set -euo pipefail
cd "$(dirname "$0")/.."

lint=true
case "${1:-}" in
  --no-lintian) lint=false ;;
  "") ;;
  -h | --help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "scripts/package.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
esac

scripts/install-deps.sh
scripts/build.sh release idem
out=${IDEM_PACKAGE_DIR:-build/package}
mkdir -p "$out"
out=$(cd "$out" && pwd)
# CPack's staging tree lives under the output directory, so two runs with their own output
# directories never share one.
(cd build/release && cpack -G DEB -B "$out" >"$out/cpack.log" 2>&1) || {
  cat "$out/cpack.log" >&2
  exit 1
}
rm -rf "$out/_CPack_Packages"
deb=$(ls -t "$out"/idem_*_amd64.deb | head -1)
echo "scripts/package.sh: $deb ($(du -k "$deb" | cut -f1) KiB)"
if $lint; then
  # Errors fail the build; warnings and notes are shown for the record.
  lintian --fail-on error --tag-display-limit 0 "$deb" || {
    echo "scripts/package.sh: lintian reported errors" >&2
    exit 1
  }
fi
