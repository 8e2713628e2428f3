#!/bin/bash
# On a GPU machine, from the repository root, with BUILD/dev carried: the SIMT walk's mapping
# (issue 35 items 1 and 3, compiler/emit_cuda/emit_simt.h) in one call. BUILD/dev holds bin/tessel
# and, for the figures before the change, bin/tessel_base (a build of the parent commit), with the
# libraries scripts/gpu_pack.sh adds. Writes under $OUT:
#   device.txt                          the GPU
#   peers_after.{txt,json}              scripts/gpu_peers.py on the SIMT cases, this build
#   peers_before.{txt,json}             the same with bin/tessel_base (same machine, same call; BASE=0: not run)
#   sanitizer.txt                       compute-sanitizer memcheck + racecheck on new kernel shapes
#   conformance.{txt,json}              the conformance suite on the GPU (sm90 and sm75), verify only
D=${1:-build/dev}
OUT=${OUT:-/tmp/tessel-gpu-out}
mkdir -p $OUT
source "$(dirname "$0")/gpu_env.sh"
T=$PWD/$D/bin/tessel
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $OUT/device.txt
CASES=${CASES:-'group_norm|depthwise|sum_16M|row_sum|global_avg|upsample|permute|transpose_4096x3072|bn_reduce'}
timeout ${PEERS_S:-150} python3 scripts/gpu_peers.py --tessel $T --filter "$CASES" --json $OUT/peers_after.json > $OUT/peers_after.txt 2>&1
echo "peers after rc=$?"; cat $OUT/peers_after.txt
if [ -x $D/bin/tessel_base ] && [ "${BASE:-1}" = 1 ]; then
  timeout ${PEERS_S:-150} python3 scripts/gpu_peers.py --tessel $PWD/$D/bin/tessel_base --filter "${BASE_CASES:-$CASES}" \
    --json $OUT/peers_before.json > $OUT/peers_before.txt 2>&1
  echo "peers before rc=$?"; cat $OUT/peers_before.txt
fi
san() {
  local r; r=$(timeout 120 compute-sanitizer --tool $1 --print-limit 5 $T run workloads/$2 --def $3 --target isa/targets/sm90.yaml --shape $4 --no-timing 2>&1)
  echo "$1 $3 $4: $(echo "$r" | grep -E "ERROR SUMMARY|RACECHECK SUMMARY" | tr '\n' ' ') $(echo "$r" | grep -oE ': verified|MISMATCH' | head -1)"
}
export -f san; export T
{
  for tool in memcheck racecheck; do
    echo "$tool pool_norm_resample.tsl group_norm N=2,I=196,G=8,E=16"
    echo "$tool quasi.tsl depthwise_stride2 N=2,H=29,W=29,C=32,R=3,S=3"
    echo "$tool pool_norm_resample.tsl global_avg_pool N=4,H=7,W=7,C=256"
    echo "$tool pool_norm_resample.tsl upsample2x N=2,H=7,W=6,C=8"
    echo "$tool vector.tsl total N=1000003"
    echo "$tool generality.tsl pool_div N=2,H=9,W=11"
  done
} > /tmp/san_jobs.txt
timeout ${SAN_S:-150} xargs -P 10 -L 1 bash -c 'san "$@"' _ < /tmp/san_jobs.txt > $OUT/sanitizer.txt 2>&1 &
timeout ${CONF_S:-170} /usr/bin/python3 scripts/conformance.py --tessel $T --targets sm90,sm75 --jobs 6 --timeout 100 \
  --json $OUT/conformance.json > $OUT/conformance.txt 2>&1
echo "conformance rc=$?"; tail -25 $OUT/conformance.txt
wait
echo "sanitizer: $(grep -c . $OUT/sanitizer.txt) of $(wc -l < /tmp/san_jobs.txt) runs; not clean: $(grep -vcE '(ERROR|RACECHECK) SUMMARY: 0 ' $OUT/sanitizer.txt)"
cat $OUT/sanitizer.txt
