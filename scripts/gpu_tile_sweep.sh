#!/bin/bash
# On a GPU machine with BUILD/dev carried (scripts/gpu_pack.sh): times GEMMs of workloads/gemm_layouts.tsl
# (odd sizes, short K, every majorness) with the default tiles and each of CANDIDATES (--gpu-tiles
# strings) through `tessel run --report` (CUDA graphs; cuBLAS beside it where the harness has it).
# The medium-problem tiles of compiler/emit_cuda/tile_policy.cc were chosen from its output.
D=build/dev
source "$(dirname "$0")/gpu_env.sh"
T=$D/bin/tessel
C=${CANDIDATES:-"default 128x128x32/64x64/ks1/st4/mma 128x64x32/64x32/ks1/st4/mma 64x64x32/32x32/ks1/st4/mma 64x128x32/32x64/ks1/st4/mma 128x128x32/32x64/ks1/st4/mma 64x64x64/32x32/ks1/st3/mma 128x64x64/64x32/ks1/st3/mma 64x64x32/32x32/ks1/st4 128x64x32/64x32/ks1/st4 128x128x32/64x64/ks1/st4 64x64x32/32x32/ks2/st4/mma 128x128x64/64x64/ks1/st3/mma 64x32x32/32x32/ks1/st4/mma"}
for spec in "matmul_nn M=1000,N=1000,K=200" "matmul_tn M=1000,N=1000,K=200" "matmul_nt M=777,N=555,K=129" "matmul_tt M=1000,N=1000,K=200" "matmul_nn M=500,N=700,K=100" "matmul_nn M=2000,N=1000,K=256"; do
  set -- $spec
  for c in $C; do
    extra=""; [ $c != default ] && extra="--gpu-tiles $c"
    $T run workloads/gemm_layouts.tsl --def $1 --target isa/targets/sm90.yaml --shape $2 $extra --report /tmp/r.json > /tmp/o.txt 2>&1
    rc=$?
    python3 -c "
import json,sys
try: r=json.load(open('/tmp/r.json'))
except Exception: r={}
print('$1 $2 $c rc=$rc', 'graph_us=%.2f' % r['graph_us'] if 'graph_us' in r else open('/tmp/o.txt').read().strip().splitlines()[-1][:120], 'cublas=%.2f' % r['baseline_graph_us'] if 'baseline_graph_us' in r else '', r.get('tiles',''))
"
    rm -f /tmp/r.json
  done
done
