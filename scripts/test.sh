#!/usr/bin/env bash
# The README's test command (and .ci/run): set-up, build, bounded fuzz runs (parser, .npu assembler + simulator, descriptions), then every
# test through ctest (its summary is the last thing printed). TESSEL_FUZZ_SECONDS=0 skips the fuzz.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
fuzz_seconds="${TESSEL_FUZZ_SECONDS:-45}"
if [ "$fuzz_seconds" != 0 ]; then
  bash scripts/fuzz.sh "$fuzz_seconds"   # the three fuzzers (45 + 30 + 20 s); must find nothing
fi
ctest --test-dir build --output-on-failure -j "${TESSEL_JOBS:-2}"
