#!/bin/bash
# On a GPU machine, from the repository root, with build/dev carried (scripts/gpu_pack.sh): the TMA
# store epilogue of the persistent kernel (TcConfig::tma_store, `/ts`) in one call: tessel run of
# /ts tiles on plain-output GEMMs and convolutions (odd M, transposed operands, a batch, the
# im2col view) and on fused epilogues with one dense output (conv+bn+relu, bias+relu, batched
# bias+GELU and scale+bias), each verified against the reference interpreter; memcheck and racecheck; the SASS
# opcode of the TMA store (cuobjdump, for gpu_backend/sass_scan.cc); tessel bench gpu on the square
# and BERT GEMMs (the /ts candidates are timed with the others). Writes under $OUT: ts_verify.txt,
# ts_sanitizer.txt, ts_sass.txt, bench_ts.{txt,json}.
OUT=${OUT:-/tmp/tessel-gpu-out}; mkdir -p $OUT
export D=build/dev; source scripts/gpu_env.sh
T=$PWD/build/dev/bin/tessel; G=isa/targets/sm90.yaml
source scripts/gpu_lib.sh
for t in ${TILES:-128x256x64/64x256/ks1/st3/ws/ts 128x128x64/128x128/ks1/st5/ws/pp/ts 256x128x64/128x128/ks1/st3/ws/ts 128x64x64/64x64/ks1/st6/ws/ts 128x192x64/64x192/ks1/st4/ws/ts}; do
  tessel_verify matmul.tsl matmul M=512,N=512,K=512 $t
  tessel_verify matmul.tsl matmul M=1000,N=1024,K=520 $t
  tessel_verify gemm_layouts.tsl matmul_tn M=1000,N=1000,K=200 $t
  tessel_verify gemm_layouts.tsl matmul_tt M=384,N=200,K=328 $t
  tessel_verify gemm_layouts.tsl batch_matmul_mbk M=200,B=3,K=96,N=136 $t
  tessel_verify conv_seed.tsl conv2d_nhwc N=2,H=14,W=14,C=64,K=128,R=3,S=3 $t
  tessel_verify conv_halo.tsl conv_pad1 N=3,H=7,W=9,C=128,K=64,R=3,S=3 $t
done > $OUT/ts_verify.txt 2>&1
tessel_verify matmul.tsl matmul M=4096,N=4096,K=4096 128x256x64/64x256/ks1/st4/ws/ts >> $OUT/ts_verify.txt
# the fused statements' dense output through the TMA unit (f16 and f32 outputs, a batch dim)
for t in ${FUSED_TILES:-128x128x64/128x128/ks1/st3/ws/pp/ts 128x256x64/64x256/ks1/st3/ws/ts 256x128x64/128x128/ks1/st3/ws/ts}; do
  tessel_verify resnet50.tsl conv_bn_relu N=2,H=14,W=14,C=128,K=256,R=3,S=3 $t
  tessel_verify resnet50.tsl conv_bn_relu N=3,H=7,W=7,C=64,K=200,R=3,S=3 $t
  tessel_verify gemm_fused.tsl matmul_bias_relu M=300,N=256,K=512 $t
  tessel_verify gemm_layouts.tsl batch_matmul_bias_gelu B=2,M=256,K=64,N=384 $t
  tessel_verify gemm_layouts.tsl batch_matmul_scale_bias B=3,M=130,K=72,N=264 $t
done >> $OUT/ts_verify.txt 2>&1
echo "verified $(grep -c ': verified' $OUT/ts_verify.txt) of $(wc -l < $OUT/ts_verify.txt)"; grep -v ": verified" $OUT/ts_verify.txt | head
tessel_sanitize "memcheck racecheck" "matmul.tsl matmul M=1000,N=520,K=200 128x128x64/128x128/ks1/st5/ws/pp/ts" "gemm_layouts.tsl batch_matmul_mbk M=200,B=3,K=96,N=136 128x256x64/64x256/ks1/st3/ws/ts" \
  "resnet50.tsl conv_bn_relu N=3,H=7,W=7,C=64,K=200,R=3,S=3 128x128x64/128x128/ks1/st3/ws/pp/ts" "gemm_layouts.tsl batch_matmul_bias_gelu B=2,M=256,K=64,N=384 128x256x64/64x256/ks1/st3/ws/ts" > $OUT/ts_sanitizer.txt 2>&1
cat $OUT/ts_sanitizer.txt
$T compile workloads/matmul.tsl --target $G --shape M=1024,N=1024,K=1024 --gpu-tiles 128x256x64/64x256/ks1/st3/ws/ts -o /tmp/ts.cu > /dev/null 2>&1
nvcc -cubin -gencode=arch=compute_90a,code=sm_90a -I/usr/local/cuda/include -o /tmp/ts.cubin /tmp/ts.cu > $OUT/ts_sass.txt 2>&1
cuobjdump -sass /tmp/ts.cubin | grep -A1 -E "UTMASTG|UTMALDG|UBLKCP|UTMACMDFLUSH" | head -12 >> $OUT/ts_sass.txt; cat $OUT/ts_sass.txt
if grep -q ": verified" $OUT/ts_verify.txt; then
  TESSEL_BENCH_FILTER=${FILTER:-gemm_4096x4096,gemm_bert,gemm_1024x1024,resnet50_conv_bn_relu} timeout ${BENCH_S:-300} $T bench gpu --json $OUT/bench_ts.json > $OUT/bench_ts.txt 2>&1
  echo "bench rc=$?"; grep -vE "^\s*$" $OUT/bench_ts.txt | grep -A4 "^gemm\|^resnet" | head -40
fi
