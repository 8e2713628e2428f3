#!/bin/bash
# On a GPU machine, from the repository root, with BUILD/dev carried (scripts/gpu_pack.sh): the
# persistent warp-specialised TMA kernels (/ws) in one call. Writes under $OUT:
#   verify.txt       tessel run of every /ws configuration on GEMMs of every majorness, odd sizes,
#                    batches and fused epilogues, each verified against the reference interpreter
#   sanitizer.txt    compute-sanitizer memcheck and racecheck on /ws kernels
#   bench.{txt,json} tessel bench gpu on the selected entries (TESSEL_BENCH_FILTER, default the
#                    square and BERT GEMMs): every ranked candidate timed, the best vs cuBLAS
#   epilogue.txt     (EPI=1) the fused epilogues (column-only subexpressions evaluated once per
#                    column) verified on every TensorCore path of sm90 and sm75, and Nsight Compute on
#                    the ResNet-50 conv+bn+relu seed layer (EPI_NCU_TILES) next to the plain convolution
#   ncu.txt          (NCU=1) Nsight Compute on the 4096^3 GEMM, ours (NCU_TILES) and cuBLAS's kernel in
#                    the same process (tessel run --verify library): SpeedOfLight and the tensor pipes
D=${1:-build/dev}
OUT=${OUT:-/tmp/tessel-gpu-out}
mkdir -p $OUT
source "$(dirname "$0")/gpu_env.sh"
T=$PWD/$D/bin/tessel
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
G=isa/targets/sm90.yaml
one() {  # file def shape tiles
  local r; r=$(timeout 120 $T run workloads/$1 --def $2 --target $G --shape $3 --gpu-tiles $4 --no-timing 2>&1)
  echo "$2 $3 $4: $(echo "$r" | grep -oE 'verified[^,]*|MISMATCH.*|error.*' | head -1)"
}
if [ "${VERIFY:-1}" = 1 ]; then
  {
    for t in ${TILES:-128x256x64/64x256/ks1/st4/ws 256x128x64/128x128/ks1/st4/ws 128x128x64/64x128/ks1/st6/ws 128x64x64/64x64/ks1/st8/ws 128x128x64/64x128/ks1/st2/ws \
             128x256x64/64x256/ks1/st4/ws/sk 256x128x64/128x128/ks1/st4/ws/sk 128x128x64/64x128/ks1/st6/ws/sk 128x64x64/64x64/ks1/st8/ws/sk \
             128x192x64/64x192/ks1/st5/ws 128x128x64/128x128/ks1/st6/ws/pp 64x256x64/64x256/ks1/st3/cs/ws/pp \
             128x256x64/64x256/ks1/st4/ws/mc 256x128x64/128x128/ks1/st4/cs/ws/mc 128x128x64/64x128/ks1/st2/ws/mc}; do
      one matmul.tsl matmul M=512,N=512,K=512 $t
      one gemm_layouts.tsl matmul_tn M=1000,N=1000,K=200 $t
      one gemm_layouts.tsl matmul_nt M=777,N=555,K=136 $t
      one gemm_layouts.tsl matmul_tt M=384,N=200,K=328 $t
      one gemm_layouts.tsl batch_matmul_mbk M=200,B=3,K=96,N=136 $t
      one gemm_layouts.tsl batch_matmul_bias_gelu B=2,M=256,K=64,N=384 $t
      one gemm_layouts.tsl batch_matmul_scale_bias B=3,M=130,K=72,N=264 $t
      one gemm_fused.tsl matmul_bias_relu M=300,N=256,K=512 $t
      # implicit GEMM through the TMA im2col mode (padding zero-filled by the TMA unit)
      one conv_seed.tsl conv2d_nhwc N=2,H=14,W=14,C=64,K=128,R=3,S=3 $t
      one conv_halo.tsl conv_pad1 N=3,H=7,W=9,C=128,K=64,R=3,S=3 $t
      one resnet50.tsl conv_bn_relu N=2,H=14,W=14,C=128,K=256,R=3,S=3 $t
      one resnet50.tsl conv_bn_relu N=2,H=8,W=8,C=64,K=64,R=1,S=1 $t
    done
    for t in ${BIG_TILES:-128x256x64/64x256/ks1/st4/cs/ws}; do one matmul.tsl matmul M=4096,N=4096,K=4096 $t; done
    one matmul.tsl matmul M=4096,N=768,K=3072 128x256x64/64x256/ks1/st4/cs/ws/sk
    one matmul.tsl matmul M=1000,N=1000,K=1000 128x128x64/64x128/ks1/st6/ws/sk
  } > $OUT/verify.txt 2>&1
  echo "verify: $(grep -c ': verified' $OUT/verify.txt) verified of $(wc -l < $OUT/verify.txt)"; grep -v ': verified' $OUT/verify.txt | head -30
fi
if [ "${SAN:-1}" = 1 ]; then
  {
    for tool in memcheck racecheck; do
      for spec in "matmul.tsl matmul M=512,N=384,K=256 128x128x64/64x128/ks1/st2/ws" "gemm_layouts.tsl matmul_tn M=296,N=200,K=136 128x256x64/64x256/ks1/st4/ws" \
                  "gemm_layouts.tsl batch_matmul_bias_gelu B=2,M=256,K=64,N=384 256x128x64/128x128/ks1/st3/ws" \
                  "matmul.tsl matmul M=512,N=512,K=512 128x128x64/64x128/ks1/st6/ws/sk" "gemm_fused.tsl matmul_bias_relu M=300,N=256,K=1000 128x256x64/64x256/ks1/st4/ws/sk" \
                  "resnet50.tsl conv_bn_relu N=2,H=14,W=14,C=128,K=256,R=3,S=3 128x128x64/64x128/ks1/st6/cs/ws" \
                  "matmul.tsl matmul M=1000,N=520,K=200 128x128x64/128x128/ks1/st6/ws/pp" "gemm_layouts.tsl matmul_tt M=896,N=256,K=328 128x256x64/64x256/ks1/st4/ws/mc"; do
        set -- $spec
        r=$(timeout 200 compute-sanitizer --tool $tool --print-limit 5 $T run workloads/$1 --def $2 --target $G --shape $3 --gpu-tiles $4 --no-timing 2>&1)
        echo "$tool $2 $3 $4: $(echo "$r" | grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' | tr '\n' ' ') $(echo "$r" | grep -oE ': verified|MISMATCH' | head -1)"
        echo "$r" | grep -q ': verified' || echo "$r" | tail -8 | sed 's/^/    /'
      done
    done
  } > $OUT/sanitizer.txt 2>&1
  cat $OUT/sanitizer.txt
fi
if [ "${BENCH:-1}" = 1 ]; then
  TESSEL_BENCH_FILTER=${FILTER:-gemm_1024x1024,gemm_4096,gemm_8192,bert,conv} timeout ${BENCH_S:-400} $T bench gpu --json $OUT/bench.json > $OUT/bench.txt 2>&1
  echo "bench rc=$?"; grep -vE "^\s*$" $OUT/bench.txt | tail -30
fi
if [ "${EPI:-0}" = 1 ]; then
  {
    for t in ${EPI_TILES:-128x256x64/64x256/ks1/st3/cs/ws 128x128x64/128x128/ks1/st4/cs/ws/pp 128x256x64/64x256/ks1/st3/cs/ws/mc \
             128x128x64/64x128/ks1/st4/wgd 128x128x32/64x64/ks1/st3/mma 64x64x32/32x32/ks1/st2}; do
      one resnet50.tsl conv_bn_relu N=2,H=14,W=14,C=128,K=256,R=3,S=3 $t
      one resnet50.tsl conv_bn_relu N=3,H=7,W=7,C=64,K=200,R=3,S=3 $t
      one gemm_layouts.tsl batch_matmul_scale_bias B=3,M=130,K=72,N=264 $t
      one gemm_layouts.tsl batch_matmul_bias_gelu B=2,M=256,K=64,N=384 $t
      one gemm_fused.tsl matmul_bias_relu M=300,N=256,K=512 $t
    done
    G=isa/targets/sm75.yaml
    for t in 64x64x32/32x32/ks1/st2 128x128x32/64x64/ks1/st2; do
      one resnet50.tsl conv_bn_relu N=3,H=7,W=7,C=64,K=200,R=3,S=3 $t
      one gemm_fused.tsl matmul_bias_relu M=300,N=256,K=512 $t
    done
  } > $OUT/epilogue.txt 2>&1
  echo "epilogue: $(grep -c ': verified' $OUT/epilogue.txt) verified of $(grep -c . $OUT/epilogue.txt)"; grep -v ': verified' $OUT/epilogue.txt | head -20
  for t in ${EPI_NCU_TILES-128x256x64/64x256/ks1/st3/cs/ws}; do  # EPI_NCU_TILES= (empty): no ncu
    for def in conv_bn_relu; do
      timeout 200 ncu --section SpeedOfLight --section WarpStateStats --section LaunchStats --section Occupancy -k regex:tessel --launch-count 1 \
        $T run workloads/resnet50.tsl --def $def --target isa/targets/sm90.yaml --shape N=256,H=14,W=14,C=256,K=512,R=3,S=3 --gpu-tiles $t --verify none --no-timing 2>&1 \
        | grep -vE "^==PROF==|^\s*$" | head -90
    done
  done >> $OUT/epilogue.txt 2>&1
  grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Stall|Warp Cycles Per Issued|Registers" $OUT/epilogue.txt | head -30
fi
if [ "${NCU:-0}" = 1 ]; then
  {
    args="run workloads/matmul.tsl --def matmul --target $G --shape M=4096,N=4096,K=4096 --gpu-tiles ${NCU_TILES:-128x256x64/64x256/ks1/st4/cs/ws} --verify library --no-timing"
    timeout 240 ncu --section SpeedOfLight --launch-count 4 $T $args 2>&1 | grep -vE "^==PROF==|^\s*$" | head -80
    timeout 240 ncu --metrics sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor_op_gmma.sum,gpu__time_duration.sum \
      --launch-count 4 $T $args 2>&1 | grep -vE "^==PROF==|^\s*$" | head -60
  } > $OUT/ncu.txt 2>&1
  grep -E "tessel_|sm90|gemm|Duration|Throughput|pipe_tensor" $OUT/ncu.txt | head -40
fi
