#!/bin/bash
# On a GPU machine, from the repository root, with build/dev carried (scripts/gpu_pack.sh): the
# blocked-layout convolution through the persistent TMA kernel in one call: the TMA layout test,
# tessel run of conv2d_blocked on odd shapes for /ws variants over the blocked window (tma_plan.h
# BlockedWindow), over operand copies (/rp, repack_plan.h) and the cp.async paths (each verified
# against the reference interpreter), memcheck of both /ws kinds, the fused epilogues (EPI=1, the
# default, of gpu_persistent_tma.sh: vector stores), and tessel bench gpu on the NHWC and blocked seeds.
# Writes under $OUT: blocked_verify.txt, epilogue.txt, bench.{txt,json}.
OUT=${OUT:-/tmp/tessel-gpu-out}; mkdir -p $OUT
export D=build/dev; source scripts/gpu_env.sh
build/dev/bin/test_gpu -tc="TMA*" 2>&1 | tail -4
T=$PWD/build/dev/bin/tessel; G=isa/targets/sm90.yaml
for t in 128x256x64/64x256/ks1/st3/cs/ws 128x128x64/128x128/ks1/st4/ws/pp 128x128x64/64x128/ks1/st4/ws/sk 256x128x64/128x128/ks1/st4/wg 128x128x32/64x64/ks1/st3/mma \
         128x256x64/64x256/ks1/st3/cs/ws/rp 128x128x64/128x128/ks1/st4/ws/pp/rp 128x128x64/64x128/ks1/st4/ws/sk/rp 256x128x64/128x128/ks1/st3/ws/mc/rp; do
 for sh in NB=1,H=5,W=6,CB=4,KB=3,R=3,S=3 NB=2,H=7,W=9,CB=4,KB=4,R=3,S=3 NB=1,H=4,W=4,CB=8,KB=8,R=1,S=1 NB=2,H=14,W=14,CB=8,KB=16,R=3,S=3; do
  r=$(timeout 120 $T run workloads/conv_seed.tsl --def conv2d_blocked --target $G --shape $sh --gpu-tiles $t --no-timing 2>&1)
  echo "$t $sh: $(echo "$r" | grep -oE 'verified[^,]*|MISMATCH.*|error.*' | head -1)"
 done
done > $OUT/blocked_verify.txt 2>&1
echo "verified $(grep -c ': verified' $OUT/blocked_verify.txt) of $(wc -l < $OUT/blocked_verify.txt)"; grep -v ": verified" $OUT/blocked_verify.txt | head
for t in 128x128x64/128x128/ks1/st4/ws/pp 128x128x64/128x128/ks1/st4/ws/pp/rp; do
  r=$(timeout 200 compute-sanitizer --tool memcheck $T run workloads/conv_seed.tsl --def conv2d_blocked --target $G --shape NB=2,H=7,W=9,CB=4,KB=4,R=3,S=3 --gpu-tiles $t --no-timing 2>&1); echo "memcheck $t: $(echo "$r" | grep -E 'ERROR SUMMARY') $(echo "$r" | grep -oE ': verified|MISMATCH' | head -1)"
done
[ "${EPI:-1}" = 1 ] && VERIFY=0 SAN=0 BENCH=0 EPI=1 EPI_NCU_TILES= bash scripts/gpu_persistent_tma.sh build/dev | head -3
if grep -q ": verified" $OUT/blocked_verify.txt; then
  TESSEL_BENCH_FILTER=conv_nhwc,conv_blocked timeout 300 $T bench gpu --json $OUT/bench.json > $OUT/bench.txt 2>&1; echo "bench rc=$?"; cat $OUT/bench.txt | grep -v "^\s*$" | tail -12
fi
