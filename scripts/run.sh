#!/usr/bin/env bash
# README command one: install dependencies, build, run the main job.
# Until the gateway lands, the main job is the engine self-check on the embedded SQLite store.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh release
exec build/release/idem selfcheck --store "${IDEM_STORE:-sqlite:idem-selfcheck.db}"
