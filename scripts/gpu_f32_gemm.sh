#!/bin/bash
# On a GPU machine, from the repository root, with BUILD/dev carried (scripts/gpu_pack.sh): f32
# contractions (issue 35 item 2) through `tessel run` (verified against the reference interpreter,
# then timed: CUDA graph of calls) on the sm90 and sm75 descriptions, with --tf32 on sm90, against
# PyTorch's torch.matmul / torch.bmm (cuBLAS SGEMM with allow_tf32 off, cuBLAS TF32 with it on; CUDA
# graphs of calls, scripts/gpu_peers.py's method) in the same run, then compute-sanitizer memcheck
# and racecheck on the odd shape. Writes $OUT/f32_gemm.log (the raw log) and $OUT/torch.json.
D=${1:-build/dev}
export OUT=${OUT:-/tmp/tessel-gpu-out}
mkdir -p $OUT
source "$(dirname "$0")/gpu_env.sh"
T=$D/bin/tessel
W=workloads/gemm_f32.tsl
run() {  # label, def, shape, target, extra flags...
  local label=$1 def=$2 shape=$3 tgt=$4; shift 4
  echo "== $label $def $shape $tgt $*"
  timeout 120 $T run $W --def $def --target isa/targets/$tgt.yaml --shape $shape --report $OUT/r.json "$@" 2>&1 | grep -vE "^\s*$" | tail -8
  python3 -c "import json;j=json.load(open('$OUT/r.json'));print('REPORT', '$label', '$def', '$shape', '$tgt', '$*'.replace(' ','_') or '-', j.get('verified'), j.get('graph_us'), j.get('stream_us'), j.get('max_abs_err'))" 2>/dev/null
  rm -f $OUT/r.json
}
time_plan() {  # def, shape, plan, extra flags...: the plan through --tile, timed without verification
  local def=$1 shape=$2 plan=$3; shift 3
  timeout 60 $T run $W --def $def --target isa/targets/sm90.yaml --shape $shape "$@" --tile $plan --verify none --report $OUT/r.json > /dev/null 2>&1
  python3 -c "import json;j=json.load(open('$OUT/r.json'));print('SWEEP $def $shape $plan', round(j.get('graph_us'),2))" 2>/dev/null || echo "SWEEP $def $shape $plan failed"
  rm -f $OUT/r.json
}
sanitize() {  # seconds per run, then one `tessel run` argument string per case: memcheck and racecheck on each
  local limit=$1; shift
  for tool in memcheck racecheck; do
    for args in "$@"; do
      echo "-- $tool $args"
      timeout $limit compute-sanitizer --tool $tool --print-limit 10 $T run $W --target isa/targets/sm90.yaml $args --no-timing 2>&1 | grep -E "ERROR SUMMARY|RACECHECK SUMMARY|verified|MISMATCH|Error|wgmma" | head -5
    done
  done
}
if [ "${SWEEP:-0}" = 1 ]; then
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv
  for spec in "matmul_f32 M=97,N=61,K=53" "matmul_f32 M=2048,N=2048,K=2048" "matmul_f32 M=1000,N=776,K=520" "batch_matmul_f32 Z=16,M=256,N=256,K=128" "matmul_f32_tn M=1000,N=776,K=520"; do
    set -- $spec
    for tf in "" --tf32; do
      plans=$($T compile $W --def $1 --target isa/targets/sm90.yaml --shape $2 $tf --explain=all 2>&1 | grep -oE "plan candidates \(ranked\): .*" | sed 's/.*: //; s/,//g')
      if [ "$2" = M=2048,N=2048,K=2048 ]; then  # variants outside the ranked list: stages, bk, warp tiles
        if [ -z "$tf" ]; then plans="$plans 128x128x16/8x8/st2/simt 128x128x16/8x8/st4/simt 128x128x8/8x8/st4/simt 128x128x32/8x8/st2/simt"
        else plans="$plans 128x128x32/64x32/st4/tf32 128x128x32/32x64/st3/tf32 128x256x32/64x64/st3/tf32 128x128x16/64x32/st4/tf32 256x128x32/64x64/st3/tf32"; fi
      fi
      for p in $plans; do
        time_plan $1 $2 $p $tf
      done
    done
  done
} > $OUT/sweep.log 2>&1
cat $OUT/sweep.log
exit 0
fi
# TF32=1 (instead of the runs below): --tf32 on the wgmma main loop (sm_90a persistent TMA kernel,
# wgmma .tf32, B read from its K-major copy): the default plan at 2048^3 and 4096^3 (sampled
# verification) and on ragged / transposed / batched / fused shapes (full verification), the SIMT
# fallback of a small shape, the first ranked plans timed, cuBLAS TF32 through torch.matmul in the
# same device call, then compute-sanitizer memcheck / racecheck on the wgmma kernel with tails.
# Writes $OUT/tf32.log.
if [ "${TF32:-0}" = 1 ]; then
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv
  run tf32 matmul_f32 M=2048,N=2048,K=2048 sm90 --tf32 --verify sample
  run tf32 matmul_f32 M=4096,N=4096,K=4096 sm90 --tf32 --verify sample
  echo "== explain 2048^3 sm90 --tf32"
  $T compile $W --def matmul_f32 --target isa/targets/sm90.yaml --shape M=2048,N=2048,K=2048 --tf32 --explain 2>&1 | grep -vE "^\s+[0-9]+x" | head -16
  python3 scripts/gpu_f32_gemm_peers.py --tf32 on 0,2048,2048,2048 0,4096,4096,4096 0,1000,776,520 16,256,256,128 0,97,61,53
  run tf32 matmul_f32 M=1000,N=776,K=520 sm90 --tf32
  run tf32 matmul_f32_tn M=1000,N=776,K=520 sm90 --tf32
  run tf32 batch_matmul_f32 Z=16,M=256,N=256,K=128 sm90 --tf32
  run tf32 matmul_f32_bias_relu M=1000,N=776,K=520 sm90 --tf32
  run tf32 matmul_f32 M=97,N=61,K=53 sm90 --tf32
  echo "== compute-sanitizer memcheck / racecheck, --tf32 wgmma kernel: 200x136x96 (tails), bias+relu 130x70x40"
  sanitize 90 "--def matmul_f32 --shape M=200,N=136,K=96 --tf32" "--def matmul_f32_bias_relu --shape M=130,N=70,K=40 --tf32"
  for s in M=2048,N=2048,K=2048 M=4096,N=4096,K=4096; do
    plans=$($T compile $W --def matmul_f32 --target isa/targets/sm90.yaml --shape $s --tf32 --explain 2>&1 | grep -oE "tile candidates \(ranked\): .*" | sed 's/.*: //; s/,//g')
    for p in $(echo $plans | tr ' ' '\n' | head -${PLANS:-8}); do
      time_plan matmul_f32 $s $p --tf32
    done
  done
} > $OUT/tf32.log 2>&1
grep -E "^REPORT|^TORCH|^SWEEP|SUMMARY|^==|^--|verified|MISMATCH|tolerance|TF32" $OUT/tf32.log | head -120
exit 0
fi
{
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv
for tgt in sm90 sm75; do
  run simt matmul_f32 M=97,N=61,K=53 $tgt
  run simt matmul_f32 M=2048,N=2048,K=2048 $tgt
  run simt matmul_f32 M=1000,N=776,K=520 $tgt
  run simt batch_matmul_f32 Z=16,M=256,N=256,K=128 $tgt
done
run simt matmul_f32_tn M=1000,N=776,K=520 sm90
run simt matmul_f32_bias_relu M=1000,N=776,K=520 sm90
for s in M=97,N=61,K=53 M=2048,N=2048,K=2048 M=1000,N=776,K=520; do run tf32 matmul_f32 $s sm90 --tf32; done
run tf32 batch_matmul_f32 Z=16,M=256,N=256,K=128 sm90 --tf32
run tf32 matmul_f32_bias_relu M=1000,N=776,K=520 sm90 --tf32
run tf32 matmul_f32 M=97,N=61,K=53 sm75 --tf32
run simt-alt matmul_f32 M=2048,N=2048,K=2048 sm90 --tile 64x128x16/8x8/st3/simt
run tf32-alt matmul_f32 M=2048,N=2048,K=2048 sm90 --tf32 --tile 128x256x32/64x64/st3/tf32
echo "== explain 2048^3 sm90"
$T compile $W --def matmul_f32 --target isa/targets/sm90.yaml --shape M=2048,N=2048,K=2048 --explain 2>&1 | grep -vE "^\s+[0-9]+x" | head -14
python3 scripts/gpu_f32_gemm_peers.py --json $OUT/torch.json 0,97,61,53 0,2048,2048,2048 0,1000,776,520 16,256,256,128
echo "== compute-sanitizer memcheck / racecheck, 97x61x53 and 130x70x40 (bias+relu), simt and tf32"
sanitize 60 "--def matmul_f32 --shape M=97,N=61,K=53" "--def matmul_f32_bias_relu --shape M=130,N=70,K=40" "--def matmul_f32 --shape M=97,N=61,K=53 --tf32"
} > $OUT/f32_gemm.log 2>&1
grep -E "^REPORT|^TORCH|SUMMARY|^==|verified|MISMATCH|tolerance" $OUT/f32_gemm.log | head -80
# SWEEP=1 (instead of the runs above): every ranked plan of the SIMT and TF32 policies on each
# shape through --tile, timed without verification (the ranking's measurements)
