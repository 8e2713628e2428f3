#!/usr/bin/env bash
# The README's test command (and .ci/run): set-up, build, bounded fuzz runs (parser, .npu assembler + simulator, descriptions,
# generated programs on every target), then every
# test through ctest (its summary is the last thing printed). TESSEL_FUZZ_SECONDS=0 skips the fuzz.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
fuzz_seconds="${TESSEL_FUZZ_SECONDS:-45}"
if [ "$fuzz_seconds" != 0 ]; then
  bash scripts/fuzz.sh "$fuzz_seconds"   # the three fuzzers (45 + 30 + 20 s); must find nothing
fi
# The program fuzzer (scripts/program_fuzz.py, issue 31): generated .tsl programs run on c, both NPU
# descriptions (naive and pruned sync) and compiled for sm75 / sm90 through NVRTC, each compared with
# the reference interpreter; half the time on a fixed seed, half on a fresh one (printed: replay a
# program with scripts/program_fuzz.py --seed SEED --index I). Reproducers go to build/program_fuzz.
# TESSEL_PROGRAM_FUZZ_SECONDS=0 skips it; TESSEL_PROGRAM_FUZZ_SEED fixes the second seed.
program_fuzz_seconds="${TESSEL_PROGRAM_FUZZ_SECONDS:-120}"
if [ "$program_fuzz_seconds" != 0 ]; then
  fixed_seconds=$((program_fuzz_seconds / 2))
  fresh_seed="${TESSEL_PROGRAM_FUZZ_SEED:-$(date +%s)}"
  echo "program fuzz: seed 31 for ${fixed_seconds}s, then seed $fresh_seed for $((program_fuzz_seconds - fixed_seconds))s"
  /usr/bin/python3 scripts/program_fuzz.py --seed 31 --seconds "$fixed_seconds" --jobs "${TESSEL_JOBS:-2}" \
    --out build/program_fuzz --json build/program_fuzz/seed31.json
  /usr/bin/python3 scripts/program_fuzz.py --seed "$fresh_seed" --seconds "$((program_fuzz_seconds - fixed_seconds))" \
    --jobs "${TESSEL_JOBS:-2}" --out build/program_fuzz --json "build/program_fuzz/seed$fresh_seed.json"
fi
ctest --test-dir build --output-on-failure -j "${TESSEL_JOBS:-2}"
