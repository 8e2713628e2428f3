#!/bin/bash
# On a GPU machine, from the repository root, with BUILD/dev carried (scripts/gpu_pack.sh): the
# CUDA emitter's GPU-side tests, `tessel bench gpu` (JSON), compute-sanitizer memcheck on the GEMM
# and convolution kernels, and `tessel run` on seed shapes. Logs and JSON under $OUT.
D=${1:-build-cuda/dev}
OUT=${OUT:-/tmp/tessel-gpu-out}
mkdir -p $OUT
export LD_LIBRARY_PATH=$PWD/$D/lib:${LD_LIBRARY_PATH:-}
for m in cudnn cublas cuda_nvrtc cuda_runtime cu13; do
  p=$(python3 -c "import importlib,os; m=importlib.import_module('nvidia.$m'); print(os.path.join(list(m.__path__)[0],'lib'))" 2>/dev/null) && export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$p
done
export TESSEL_CACHE_DIR=$PWD/$D/nvrtc-cache
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > $OUT/device.txt 2>&1
ldd $D/bin/test_gpu_emit | grep "not found" >> $OUT/device.txt
cat $OUT/device.txt
step() { local name=$1 limit=$2; shift 2; local t0=$(date +%s); timeout $limit "$@" > $OUT/$name.log 2>&1; local rc=$?; echo "$name: rc=$rc ($(( $(date +%s) - t0 )) s)"; tail -4 $OUT/$name.log; }
step bench 240 $D/bin/bench_gpu_emit $OUT/bench.json
step test_gpu_emit 150 $D/bin/test_gpu_emit
step memcheck 120 compute-sanitizer --tool memcheck --print-limit 20 $D/bin/test_gpu_emit -tc='TensorCore*,the SIMT*'
step run_skinny 60 $D/bin/tessel run workloads/matmul.tsl --target isa/targets/sm90.yaml --shape M=512,N=16,K=512
step run_conv 90 $D/bin/tessel run workloads/conv_seed.tsl --def conv2d_nhwc --target isa/targets/sm90.yaml --shape N=8,H=14,W=14,C=64,K=128,R=3,S=3
step test_emit_cuda 120 $D/bin/test_emit_cuda
# SASS of the 4096^3 kernel: instruction mix (LDSM = ldmatrix from wmma::load_matrix_sync, HMMA)
$D/bin/tessel compile workloads/matmul.tsl --target isa/targets/sm90.yaml --shape M=4096,N=4096,K=4096 -o $OUT/mm4096.cu 2>/dev/null
nvcc -cubin -arch=sm_90 -I/usr/local/cuda/include -o $OUT/mm4096.cubin $OUT/mm4096.cu > $OUT/nvcc.log 2>&1 &&
  cuobjdump -sass $OUT/mm4096.cubin | grep -oE "^ +/\*[0-9a-f]{4}\*/ +[A-Z][A-Z0-9_]*(\.[A-Z0-9_.]+)?" | awk '{print $2}' | sort | uniq -c | sort -rn | head -25 > $OUT/sass_mix.txt
head -25 $OUT/sass_mix.txt
grep -A30 "tessel bench gpu on" $OUT/bench.log
