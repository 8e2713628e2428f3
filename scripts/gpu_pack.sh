#!/bin/bash
# Packs the CUDA emitter's GPU programs for a GPU machine (issue 7): stripped binaries, the
# shared libraries they load that a GPU machine lacks (isl, gmp, fmt, yaml-cpp, systemc, ...), and a primed
# NVRTC cache, under BUILD/dev. Carry BUILD/dev to the machine and run scripts/gpu_device_run.sh.
set -euo pipefail
BUILD=${1:-build-cuda}
D=$BUILD/dev
mkdir -p $D/bin $D/lib $D/nvrtc-cache
for b in tests/gpu_emit/test_gpu_emit tests/gpu_emit/bench_gpu_emit tests/test_emit_cuda compiler/cli/tessel; do
  strip -o $D/bin/$(basename $b) $BUILD/$b
done
for b in $D/bin/*; do
  # everything but the C/C++ runtime and the CUDA libraries, which the GPU machine has
  ldd $b | awk '/=> \// {print $3}' | grep -vE '/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s)\.so|/usr/local/cuda|libcud|libcublas|libnvrtc' || true
done | sort -u | while read -r lib; do cp -L "$lib" $D/lib/; done
# the benchmark's tile candidates, compiled ahead (same NVRTC version there)
TESSEL_CACHE_DIR=$PWD/$D/nvrtc-cache $BUILD/tests/gpu_emit/bench_gpu_emit > /dev/null
du -sh $D
