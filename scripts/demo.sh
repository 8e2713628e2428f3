#!/usr/bin/env bash
# The README's main job: set-up, build, then the headline demo — compile GEMMs for the DaVinci-like
# NPU, simulate them on the SystemC model, print cycles and per-unit utilization, and verify every
# output element against the reference interpreter. Reports and a Perfetto trace land in out/.
# TESSEL_BUILD_DIR=dir: use (and build only the `tessel` target of) an existing build directory.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${TESSEL_BUILD_DIR:-}" ]; then
  build=$TESSEL_BUILD_DIR
  cmake --build "$build" -j "${TESSEL_JOBS:-2}" --target tessel
else
  bash scripts/setup.sh
  bash scripts/build.sh
  build=build
fi
tessel=$build/compiler/cli/tessel
mkdir -p out
$tessel --version
echo
echo "== 1024x1024x1024 f16 GEMM (f32 accumulate) on davinci-910, 256x256 output tiles (16 of the 32 cores) =="
echo "   (cube % is over the cores used; MACs/cycle against their peak: half the chip's)"
$tessel run workloads/matmul.tsl --target isa/targets/davinci-910.yaml --shape M=1024,N=1024,K=1024 \
  --tile m=256/128,n=256/64,k=128/64 --report out/gemm1024_report.json --trace out/gemm1024_trace.json
echo
echo "== the same GEMM on all 32 cores (128x256 tiles: GM-bandwidth bound, shorter in time) =="
$tessel run workloads/matmul.tsl --target isa/targets/davinci-910.yaml --shape M=1024,N=1024,K=1024 \
  --tile m=128/128,n=256/64,k=128/64 --report out/gemm1024_32cores_report.json
echo
echo "== seed GEMM 512x128x512 on davinci-910, naive vs pruned sync =="
for sync in naive pruned; do
  $tessel run workloads/matmul.tsl --target isa/targets/davinci-910.yaml --shape M=512,N=128,K=512 \
    --sync $sync --report out/gemm512_${sync}_report.json
done
echo
echo "== operators outside the templates (the general vector lowering): pixel shuffle written with / and %, softmax over 1000-wide rows =="
$tessel run workloads/quasi.tsl --def pixel_shuffle --target isa/targets/davinci-910.yaml --shape N=2,CI=16,H=32,W=32
$tessel run workloads/bert.tsl --def softmax --target isa/targets/davinci-910.yaml --shape M=512,N=1000
echo
echo "reports: out/*_report.json; trace (open in https://ui.perfetto.dev): out/gemm1024_trace.json"
