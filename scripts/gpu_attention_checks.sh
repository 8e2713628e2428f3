#!/bin/bash
# On a GPU machine, from the repository root, with BUILD/dev carried (scripts/gpu_pack.sh): the fused
# attention kernels' correctness checks in one call. Writes under $OUT:
#   attention_odd_sizes.txt   causal rows past the keys (S > T), odd sizes, BSHD, decode, on the sm90
#                             (wgmma), sm80 (mma.sync) and sm75 (SIMT) descriptions, each verified
#                             against the interpreter by `tessel run`
#   attention_sanitizer.txt   compute-sanitizer racecheck and memcheck of the same kernels
#                             (`tessel run --no-timing`: one launch each), one line per run
# On sm90 both also run given wgmma plans (PLAN=... in a line) whose kernels the default does not
# pick at these sizes: several blocks an SM (/occ2 with one and with three K / V slots, /occ3 with
# cp.async), persistent blocks claiming their tiles from a counter (/persistent/dynamic). TARGETS="sm90" limits the descriptions (default: sm90 sm80 sm75).
D=${1:-build/dev}
OUT=${OUT:-/tmp/tessel-gpu-out}
mkdir -p $OUT
source "$(dirname "$0")/gpu_env.sh"
export T=$PWD/$D/bin/tessel W=workloads/attention.tsl
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
TARGETS=${TARGETS:-sm90 sm80 sm75}
one() {  # target def shape [plan] -> one line: the run's verdict
  echo "$1 $2 $3 ${4:-default}: $(timeout 120 $T run $W --def $2 --target isa/targets/$1.yaml --shape $3 ${4:+--tile $4} --no-timing 2>&1 | grep -E 'verified|MISMATCH|rror' | head -2 | tr '\n' ' ')"
}
san() {  # tool target def shape [plan] -> one line: the sanitizer's summary and the verdict
  local r; r=$(timeout 240 compute-sanitizer --tool $1 --print-limit 5 $T run $W --def $3 --target isa/targets/$2.yaml --shape $4 ${5:+--tile $5} --no-timing 2>&1)
  echo "$1 $2 $3 $4 ${5:-default}: $(echo "$r" | grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' | tr '\n' ' ') $(echo "$r" | grep -oE ': verified|MISMATCH' | head -1)"
}
export -f one san
OCC1=attention/wgmma/64x128/tma/heavy/lazy/occ2 OCC3=attention/wgmma/64x128/cpasync/heavy/lazy/occ3
DYN=attention/wgmma/128x128/tma/pingpong/heavy/lazy/persistent/dynamic
for t in $TARGETS; do
  for s in B=1,H=2,S=1000,T=128,D=64 B=1,H=2,S=128,T=77,D=128 B=2,H=3,S=300,T=300,D=64; do echo "$t attention_causal_bhsd $s"; done
  echo "$t attention_causal_bshd B=1,H=2,S=777,T=100,D=128"
  echo "$t attention_bhsd B=1,H=4,S=1,T=5000,D=128"
  if [ $t = sm90 ]; then  # several blocks an SM: value dim 128 one K / V slot, 64 three; cp.async three blocks
    for s in B=1,H=2,S=1000,T=128,D=64 B=1,H=2,S=128,T=77,D=128 B=2,H=3,S=300,T=300,D=128; do echo "$t attention_causal_bhsd $s $OCC1"; done
    echo "$t attention_causal_bshd B=1,H=2,S=777,T=100,D=128 $OCC1"
    echo "$t attention_bhsd B=1,H=2,S=250,T=4000,D=128 $OCC1"
    echo "$t attention_bf16_bhsd B=1,H=2,S=400,T=333,D=64 $OCC1"
    for s in B=1,H=2,S=1000,T=128,D=64 B=2,H=3,S=300,T=300,D=64; do echo "$t attention_causal_bhsd $s $OCC3"; done
    echo "$t attention_bhsd B=1,H=2,S=250,T=4000,D=64 $OCC3"
    # persistent blocks claiming tiles from a counter: more tiles than SMs, tiles without key blocks (S > T)
    echo "$t attention_causal_bhsd B=2,H=40,S=300,T=300,D=128 $DYN"
    echo "$t attention_causal_bhsd B=1,H=70,S=1000,T=128,D=128 $DYN"
    echo "$t attention_bhsd B=3,H=50,S=400,T=333,D=64 ${DYN/128x128/192x128}"
    echo "$t attention_bf16_bhsd B=2,H=70,S=256,T=300,D=128 ${DYN/heavy\/}"
    echo "$t attention_bhsd B=4,H=40,S=300,T=700,D=128 attention/wgmma/128x128/tma/pingpong/lazy/persistent"  # the 1k d128 default's tile order
  fi
done | xargs -P 8 -L 1 bash -c 'one "$@"' _ > $OUT/attention_odd_sizes.txt &  # beside the sanitizer runs; line by line: a time limit keeps what finished
for tool in racecheck memcheck; do
  for t in $TARGETS; do
    echo "$tool $t attention_bhsd B=1,H=2,S=192,T=256,D=128"
    echo "$tool $t attention_causal_bhsd B=1,H=2,S=200,T=130,D=64"
    echo "$tool $t attention_bhsd B=1,H=2,S=1,T=3000,D=128"
  done
  echo "$tool sm90 attention_bf16_bhsd B=1,H=2,S=128,T=128,D=64"
  echo "$tool sm90 attention_bhsd B=1,H=2,S=192,T=640,D=128 $OCC1"
  echo "$tool sm90 attention_causal_bhsd B=1,H=2,S=200,T=300,D=64 $OCC1"
  echo "$tool sm90 attention_causal_bhsd B=1,H=2,S=200,T=300,D=64 $OCC3"
  echo "$tool sm90 attention_causal_bhsd B=1,H=70,S=256,T=256,D=128 $DYN"
done | xargs -P 8 -L 1 bash -c 'san "$@"' _ | tee $OUT/attention_sanitizer.txt
wait
sort -o $OUT/attention_sanitizer.txt $OUT/attention_sanitizer.txt
sort -o $OUT/attention_odd_sizes.txt $OUT/attention_odd_sizes.txt
cat $OUT/attention_odd_sizes.txt
