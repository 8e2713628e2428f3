#!/bin/bash
# On a GPU machine, from the repository root, with BUILD/dev carried (scripts/gpu_pack.sh): the
# program fuzzer (scripts/program_fuzz.py --gpu-run, sm90 and sm75 columns, each program's CUDA run
# on the GPU and compared with the reference interpreter) once per GPU, side by side: fuzzer i sees
# only GPU i (CUDA_VISIBLE_DEVICES) and gets an equal share of the CPU cores, seed BASE + i.
#   scripts/gpu_program_fuzz.sh BUILD/dev BASE_SEED SECONDS
# Writes $OUT/gpus.txt, $OUT/fuzz_SEED.txt (the summary table) and .json, and $OUT/bugs_SEED.tgz
# (the minimized reproducers) for a seed that found any.
set -u
D=${1:-build/dev}; BASE=${2:?base seed}; SECONDS_EACH=${3:?seconds}
export OUT=${OUT:-/tmp/tessel-gpu-out}
mkdir -p $OUT
source "$(dirname "$0")/gpu_env.sh"
nvidia-smi --query-gpu=index,name,driver_version --format=csv > $OUT/gpus.txt
GPUS=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
[ "$GPUS" -ge 1 ] || { echo "gpu_program_fuzz: no GPU" >&2; exit 2; }
JOBS=$(( $(nproc) / GPUS - 1 )); [ $JOBS -ge 1 ] || JOBS=1
for ((i = 0; i < GPUS; i++)); do
  seed=$((BASE + i))
  CUDA_VISIBLE_DEVICES=$i python3 scripts/program_fuzz.py --tessel $D/bin/tessel --seed $seed --targets sm90,sm75 \
    --gpu-run --jobs $JOBS --seconds $SECONDS_EACH --minimize-seconds 15 --out /tmp/fuzz_bugs_$seed \
    --json $OUT/fuzz_$seed.json > $OUT/fuzz_$seed.txt 2>&1 &
done
wait
for ((i = 0; i < GPUS; i++)); do
  seed=$((BASE + i))
  [ -n "$(ls -A /tmp/fuzz_bugs_$seed 2>/dev/null)" ] && tar czf $OUT/bugs_$seed.tgz -C /tmp fuzz_bugs_$seed
  tail -n 6 $OUT/fuzz_$seed.txt
done
