#!/bin/bash
# On a GPU machine, from the repository root, with build/dev carried (scripts/gpu_pack.sh): operand
# copies (/rp, repack_plan.h) beyond the blocked convolution (scripts/gpu_blocked_conv.sh): a GEMM
# whose A splits K around M (gemm_layouts.tsl matmul_ksplit) with /rp tiles, with and without TMA
# stores, and NCHW convolutions (conv2d.tsl conv2d: both operands transposed into NHWC order by
# the copy kernels), each verified against the reference interpreter; racecheck and memcheck of
# /rp kernels; with BENCH=1 tessel bench gpu on the NHWC and NCHW seeds. Writes $OUT/rp_verify.txt,
# $OUT/rp_sanitizer.txt and $OUT/bench_rp.{txt,json}.
OUT=${OUT:-/tmp/tessel-gpu-out}; mkdir -p $OUT
export D=build/dev; source scripts/gpu_env.sh
T=$PWD/build/dev/bin/tessel; G=isa/targets/sm90.yaml
source scripts/gpu_lib.sh
{
  for t in 128x256x64/64x256/ks1/st4/ws/rp/ts 128x256x64/64x256/ks1/st4/cs/ws/rp 128x128x64/128x128/ks1/st5/ws/pp/rp/ts 128x128x64/64x128/ks1/st6/ws/sk/rp; do
    tessel_verify gemm_layouts.tsl matmul_ksplit K1=3,M=1000,K2=64,N=520 $t
    tessel_verify gemm_layouts.tsl matmul_ksplit K1=4,M=512,K2=128,N=256 $t
  done
  tessel_verify gemm_layouts.tsl matmul_ksplit K1=4,M=4096,K2=64,N=4096
  for t in 128x256x64/64x256/ks1/st3/cs/ws/rp 128x128x64/128x128/ks1/st4/ws/pp/rp 128x128x64/64x128/ks1/st4/ws/sk/rp; do
    tessel_verify conv2d.tsl conv2d N=2,C=64,H=7,W=9,K=80,R=3,S=3 $t
    tessel_verify conv2d.tsl conv2d N=3,C=128,H=14,W=14,K=256,R=3,S=3 $t
    tessel_verify conv2d.tsl conv2d N=2,C=64,H=5,W=6,K=64,R=1,S=1 $t
  done
  tessel_verify conv2d.tsl conv2d N=32,C=64,H=14,W=14,K=256,R=3,S=3
} > $OUT/rp_verify.txt 2>&1
echo "verified $(grep -c ': verified\| verified' $OUT/rp_verify.txt) of $(wc -l < $OUT/rp_verify.txt)"; cat $OUT/rp_verify.txt
tessel_sanitize "racecheck memcheck" "conv_seed.tsl conv2d_blocked NB=2,H=7,W=9,CB=4,KB=4,R=3,S=3 128x256x64/64x256/ks1/st3/cs/ws/rp" "gemm_layouts.tsl matmul_ksplit K1=3,M=1000,K2=64,N=520 128x128x64/128x128/ks1/st5/ws/pp/rp/ts" \
              "conv2d.tsl conv2d N=2,C=64,H=7,W=9,K=80,R=3,S=3 128x128x64/128x128/ks1/st4/ws/pp/rp" > $OUT/rp_sanitizer.txt 2>&1
cat $OUT/rp_sanitizer.txt
if [ "${BENCH:-1}" = 1 ]; then
  TESSEL_BENCH_FILTER=conv_nhwc,conv_nchw timeout ${BENCH_S:-300} $T bench gpu --json $OUT/bench_rp.json > $OUT/bench_rp.txt 2>&1
  echo "bench rc=$?"; grep -vE "^\s*$" $OUT/bench_rp.txt | grep -A4 "^conv" | head -20
fi
