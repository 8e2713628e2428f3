#!/bin/bash
# On a GPU machine with BUILD/dev carried (scripts/gpu_pack.sh): every ranked TensorCore tile
# candidate of one GEMM (`tessel compile --explain`'s list, the first TOP of them) timed with
# `tessel run --gpu-tiles`, one line each (graph microseconds, verification), the default first.
#   bash scripts/gpu_tile_candidates.sh build/dev gemm_layouts.tsl matmul_tn M=1000,N=1000,K=200 [TOP]
D=${1:-build/dev}; FILE=$2; DEF=$3; SHAPE=$4; TOP=${5:-16}
source "$(dirname "$0")/gpu_env.sh"
T=$PWD/$D/bin/tessel
run() { timeout 60 $T run workloads/$FILE --def $DEF --target isa/targets/sm90.yaml --shape $SHAPE "$@" 2>&1 |
          grep -oE '[0-9.]+ us/call in a CUDA graph|verified|MISMATCH' | tr '\n' ' '; }
echo "$DEF $SHAPE default: $(run)"
$T compile workloads/$FILE --def $DEF --target isa/targets/sm90.yaml --shape $SHAPE --explain -o /dev/null 2>&1 |
  sed -n 's/.*tile candidates (ranked): //p' | tr ',' '\n' | sed 's/^ *//' | head -$TOP | while read -r c; do
    echo "$DEF $SHAPE $c: $(run --gpu-tiles "$c")"
  done
