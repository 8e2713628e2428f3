#!/usr/bin/env bash
# The README's test command (and .ci/run): set-up, build, then every test through ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
ctest --test-dir build --output-on-failure -j "${TESSEL_JOBS:-2}"
