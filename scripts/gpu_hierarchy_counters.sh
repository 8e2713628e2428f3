#!/bin/bash
# On a GPU machine (H100 or H200), from the repository root, with BUILD/dev carried
# (scripts/gpu_pack.sh): the GPU description checked against the device (check-hierarchy --device,
# --measure) and the cost model against Nsight Compute counters, in one call (about 8 minutes). Writes under $OUT:
#   device.txt                     nvidia-smi's name, driver, clocks
#   check_<desc>.txt               `check-hierarchy --device` on sm90, sm90-h100 and sm90-h200 (the
#                                  part's own description must agree; issue 17 item 16)
#   measure.txt, measured.yaml     `check-hierarchy DESC --device --measure --write-measured` on the
#                                  present part's description (sm90-h100 / sm90-h200 by name)
#   measured_check.txt             the measured variant validated by the same checker
#   counters.jsonl, sweep.txt      scripts/counter_sweep.py: ncu counters + analytic predictions
#   correlation.txt/.json/.png     scripts/counter_correlation.py on them
# QUICK=1: a dozen kernels in the sweep. SWEEP=0 / MEASURE=0 skip a part.
D=${1:-build/dev}
OUT=${OUT:-/tmp/tessel-gpu-out}
mkdir -p $OUT
source "$(dirname "$0")/gpu_env.sh"
T=$PWD/$D/bin/tessel
export PATH=$PATH:/usr/local/cuda/bin
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee $OUT/device.txt
NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$NAME" in
  *H200*) DESC=sm90-h200 ;;
  *H100*) DESC=sm90-h100 ;;
  *) DESC=sm90 ;;
esac
echo "== check-hierarchy --device (part: $DESC)"
for d in sm90 sm90-h100 sm90-h200; do
  timeout 60 $T check-hierarchy isa/targets/$d.yaml --device > $OUT/check_$d.txt 2>&1
  echo "$d: rc=$? $(grep -E 'agrees with|differ|note:' $OUT/check_$d.txt | tr '\n' ' ')"
done
if [ "${MEASURE:-1}" = 1 ]; then
  echo "== check-hierarchy isa/targets/$DESC.yaml --device --measure --write-measured"
  t0=$(date +%s)
  timeout ${MEASURE_S:-180} $T check-hierarchy isa/targets/$DESC.yaml --device --measure --write-measured $OUT/measured.yaml \
    > $OUT/measure.txt 2>&1
  echo "measure: rc=$? ($(( $(date +%s) - t0 )) s; 0: every figure within tolerance, 1: a mismatch, see below)"
  sed -n '/^measured on/,$p' $OUT/measure.txt
  [ -f $OUT/measured.yaml ] && { timeout 60 $T check-hierarchy $OUT/measured.yaml --device > $OUT/measured_check.txt 2>&1
    echo "measured variant: rc=$? $(grep -E 'valid gpu description' $OUT/measured_check.txt)"; }
fi
if [ "${SWEEP:-1}" = 1 ]; then
  echo "== ncu counter sweep"
  t0=$(date +%s)
  Q=""; [ "${QUICK:-0}" = 1 ] && Q=--quick
  timeout ${SWEEP_S:-330} /usr/bin/python3 scripts/counter_sweep.py --tessel $T --out $OUT/counters.jsonl --jobs ${JOBS:-6} $Q \
    --run-on isa/targets/$DESC.yaml \
    --keep /tmp/tessel-ncu > $OUT/sweep.txt 2>&1
  echo "sweep: rc=$? ($(( $(date +%s) - t0 )) s), $(grep -c ' ok' $OUT/sweep.txt) ok, $(grep -c FAILED $OUT/sweep.txt) failed"
  grep -E "FAILED|does not know|no ncu" $OUT/sweep.txt | head -8
  /usr/bin/python3 scripts/counter_correlation.py $OUT/counters.jsonl --png $OUT/correlation.png --json $OUT/correlation.json \
    > $OUT/correlation.txt 2>&1
  echo "correlation: rc=$?"; cat $OUT/correlation.txt
fi
