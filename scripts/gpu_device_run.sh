#!/bin/bash
# On a GPU machine, from the repository root, with BUILD/dev carried (scripts/gpu_pack.sh): the
# CUDA emitter's GPU-side tests, `tessel bench gpu` (JSON), `tessel run` (interpreter check + time +
# library ratio + --explain) on every seed GEMM shape and a small convolution, optionally
# compute-sanitizer memcheck (MEMCHECK=1) and the SASS mix of the 4096^3 kernel. Logs and JSON
# under $OUT (at most 8 files: device.txt bench.log bench.json test_gpu_emit.log runs.log
# test_emit_cuda.log memcheck.log sass_mix.txt).
D=${1:-build-cuda/dev}
OUT=${OUT:-/tmp/tessel-gpu-out}
mkdir -p $OUT
source "$(dirname "$0")/gpu_env.sh"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > $OUT/device.txt 2>&1
ldd $D/bin/test_gpu_emit | grep "not found" >> $OUT/device.txt
cat $OUT/device.txt
step() { local name=$1 limit=$2; shift 2; local t0=$(date +%s); timeout $limit "$@" > $OUT/$name.log 2>&1; local rc=$?; echo "$name: rc=$rc ($(( $(date +%s) - t0 )) s)"; tail -4 $OUT/$name.log; }
# QUICK=1: only the TensorCore GPU tests named by TESTS (doctest -tc patterns) and the bench entries
# named by TESSEL_BENCH_FILTER (comma-separated substrings; all when unset), then the SASS check
if [ -n "${TESTS:-}" ]; then step test_gpu_emit ${TEST_S:-220} $D/bin/test_gpu_emit -tc="$TESTS"; fi
step bench ${BENCH_S:-300} $D/bin/tessel bench gpu --json $OUT/bench.json
if [ -z "${TESTS:-}" ] && [ "${QUICK:-0}" != 1 ]; then step test_gpu_emit ${TEST_S:-220} $D/bin/test_gpu_emit; fi
if [ "${QUICK:-0}" != 1 ]; then
{
  for s in M=512,N=16,K=512 M=512,N=32,K=512 M=512,N=64,K=512 M=512,N=128,K=512 M=256,N=256,K=256 M=1024,N=32,K=512 M=2048,N=32,K=512; do
    echo "== matmul $s"
    timeout 60 $D/bin/tessel run workloads/matmul.tsl --target isa/targets/sm90.yaml --shape $s 2>&1 | grep -vE "^\s*$" | tail -14
  done
  echo "== conv"
  timeout 90 $D/bin/tessel run workloads/conv_seed.tsl --def conv2d_nhwc --target isa/targets/sm90.yaml --shape N=8,H=14,W=14,C=64,K=128,R=3,S=3 2>&1 | tail -6
} > $OUT/runs.log 2>&1
echo "runs:"; grep -E "^==|verif|match|us/call|cuBLAS|cuDNN" $OUT/runs.log | head -40
fi
if [ "${MEMCHECK:-0}" = 1 ]; then
  step memcheck 120 compute-sanitizer --tool memcheck --print-limit 20 $D/bin/test_gpu_emit -tc='TensorCore*,ldmatrix*,the SIMT*'
fi
# NCU="4096 conv_nhwc": Nsight Compute on the first TensorCore launch of each named bench entry
for f in ${NCU:-}; do
  TESSEL_BENCH_FILTER=$f timeout 200 ncu --clock-control none -k regex:tessel_wmma -c 1 --section SpeedOfLight \
    --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
    $D/bin/tessel bench gpu > $OUT/ncu_$f.log 2>&1
  echo "ncu $f: rc=$?"; grep -E "Throughput|Stall|Issue|Hit Rate|Duration|Busy|Bandwidth|Pipe|Warp Cycles" $OUT/ncu_$f.log | head -45
done
[ "${QUICK:-0}" != 1 ] && step test_emit_cuda 60 $D/bin/test_emit_cuda
# SASS of the 4096^3 kernel (sm_90a when it is a wgmma kernel): instruction mix (LDSM, HMMA, HGMMA)
$D/bin/tessel compile workloads/matmul.tsl --target isa/targets/sm90.yaml --shape M=4096,N=4096,K=4096 -o /tmp/mm4096.cu 2>/dev/null
nvcc -cubin -gencode=arch=compute_90a,code=sm_90a -I/usr/local/cuda/include -o /tmp/mm4096.cubin /tmp/mm4096.cu > /tmp/nvcc.log 2>&1 &&
  cuobjdump -sass /tmp/mm4096.cubin | grep -oE "^ +/\*[0-9a-f]{4}\*/ +[A-Z][A-Z0-9_]*(\.[A-Z0-9_.]+)?" | awk '{print $2}' | sort | uniq -c | sort -rn | head -25 > $OUT/sass_mix.txt
cuobjdump -sass /tmp/mm4096.cubin 2>/dev/null | grep -A1 -m2 HGMMA >> $OUT/sass_mix.txt
cat $OUT/sass_mix.txt | head -30
grep -A40 "tessel bench gpu on" $OUT/bench.log
