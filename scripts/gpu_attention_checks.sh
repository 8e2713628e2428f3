#!/bin/bash
# On a GPU machine, from the repository root, with BUILD/dev carried (scripts/gpu_pack.sh): the fused
# attention kernels' correctness checks in one call. Writes under $OUT:
#   attention_odd_sizes.txt   causal rows past the keys (S > T), odd sizes, BSHD, decode, on the sm90
#                             (wgmma), sm80 (mma.sync) and sm75 (SIMT) descriptions, each verified
#                             against the interpreter by `tessel run`
#   attention_sanitizer.txt   compute-sanitizer racecheck and memcheck of the same kernels
#                             (`tessel run --no-timing`: one launch each), one line per run
D=${1:-build/dev}
OUT=${OUT:-/tmp/tessel-gpu-out}
mkdir -p $OUT
source "$(dirname "$0")/gpu_env.sh"
export T=$PWD/$D/bin/tessel W=workloads/attention.tsl
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
one() {  # target def shape -> one line: the run's verdict
  echo "$1 $2 $3: $(timeout 120 $T run $W --def $2 --target isa/targets/$1.yaml --shape $3 --no-timing 2>&1 | grep -E 'verified|MISMATCH|rror' | head -2 | tr '\n' ' ')"
}
san() {  # tool target def shape -> one line: the sanitizer's summary and the verdict
  local r; r=$(timeout 240 compute-sanitizer --tool $1 --print-limit 5 $T run $W --def $3 --target isa/targets/$2.yaml --shape $4 --no-timing 2>&1)
  echo "$1 $2 $3 $4: $(echo "$r" | grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' | tr '\n' ' ') $(echo "$r" | grep -oE ': verified|MISMATCH' | head -1)"
}
export -f one san
for t in sm90 sm80 sm75; do
  for s in B=1,H=2,S=1000,T=128,D=64 B=1,H=2,S=128,T=77,D=128 B=2,H=3,S=300,T=300,D=64; do echo "$t attention_causal_bhsd $s"; done
  echo "$t attention_causal_bshd B=1,H=2,S=777,T=100,D=128"
  echo "$t attention_bhsd B=1,H=4,S=1,T=5000,D=128"
done | xargs -P 8 -L 1 bash -c 'one "$@"' _ | sort | tee $OUT/attention_odd_sizes.txt
for tool in racecheck memcheck; do
  for t in sm90 sm80 sm75; do
    echo "$tool $t attention_bhsd B=1,H=2,S=192,T=256,D=128"
    echo "$tool $t attention_causal_bhsd B=1,H=2,S=200,T=130,D=64"
    echo "$tool $t attention_bhsd B=1,H=2,S=1,T=3000,D=128"
  done
  echo "$tool sm90 attention_bf16_bhsd B=1,H=2,S=128,T=128,D=64"
done | xargs -P 8 -L 1 bash -c 'san "$@"' _ | sort | tee $OUT/attention_sanitizer.txt
