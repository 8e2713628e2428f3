#!/bin/bash
# On a GPU machine, from the repository root, with BUILD/dev carried (scripts/gpu_pack.sh) and, for the
# sweep, Debian's dask/distributed carried as .pydask (pure Python, put on PYTHONPATH): the checks of the
# plan and tuning work, each step's log under $OUT.
#   tune     `tessel tune` 512^3 GEMM on sm90 (16 trials): time to the first result, total, best vs the default
#   plans    `tessel run --tile PLAN` on the sm90, sm80 and sm75 descriptions (verified on the GPU at hand),
#            and a plan the kernel cannot run (exit 1 with the reason)
#   bench    `tessel bench gpu` (the tile policy's shortlist) and its wall time; with EXHAUSTIVE_FILTER (a
#            TESSEL_BENCH_FILTER value) the same rows again with --exhaustive, for the ratio comparison
#   attention  the six-statement causal attention (tests/gpu_emit/data) at 512 tokens on the sm90 and sm75
#            descriptions, verified against the interpreter, and compute-sanitizer memcheck of the sm90 run
#   gputests the GPU-side doctest binary (test_gpu_emit)
#   sweep    scripts/gpu_sweep.py over SWEEP_PLANS plans of a 4096^3 GEMM on 1 GPU and on all GPUs (a first
#            pass fills the NVRTC cache so both timed passes compile nothing)
# STEPS selects (default "tune plans bench sweep").
D=${D:-build/dev}
OUT=${OUT:-/tmp/tessel-gpu-out}
mkdir -p $OUT
source "$(dirname "$0")/gpu_env.sh"
T=$D/bin/tessel
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/device.txt 2>&1
cat $OUT/device.txt
has() { [[ " ${STEPS:-tune plans bench sweep} " == *" $1 "* ]]; }
stamp() { python3 -c 'import time; print(time.time())'; }
since() { python3 -c "import time; print('%.1f' % (time.time() - $1))"; }
# each line of stdin prefixed with the seconds since the pipe started
timestamps() { python3 -u -c 'import sys, time
t = time.time()
for line in sys.stdin: print("%6.1f s  %s" % (time.time() - t, line), end="", flush=True)'; }

if has tune; then
  rm -f /tmp/tune_gpu.jsonl /tmp/tune_gpu_db.json
  t0=$(stamp)
  timeout 300 $T tune workloads/matmul.tsl --target isa/targets/sm90.yaml --shape M=512,N=512,K=512 --trials 16 \
    --log /tmp/tune_gpu.jsonl --db /tmp/tune_gpu_db.json 2>&1 | timestamps > $OUT/tune.log
  echo "== tune"; tail -6 $OUT/tune.log
  # what run then runs: the database's plan, named as such
  TESSEL_TUNE_DB=/tmp/tune_gpu_db.json timeout 120 $T run workloads/matmul.tsl --target isa/targets/sm90.yaml \
    --shape M=512,N=512,K=512 2>&1 | grep -E "tile|plan|verified|MISMATCH|us" | head -8 >> $OUT/tune.log
  tail -8 $OUT/tune.log
fi

if has plans; then
  {
    for spec in "sm90 64x128x64/64x64/ks1/st4/mma" "sm90 128x128x64/64x128/ks1/st6/ws/ts" "sm90 m=128/64,n=128/64,k=32/16" \
                "sm80 128x128x32/64x64/ks1/st4/mma" "sm80 m=64/32,n=64/32,k=32/16" "sm75 64x64x32/32x32/ks1/st2" \
                "sm75 m=128/64,n=128/64,k=32/16"; do
      set -- $spec
      echo "== $1 --tile $2"
      timeout 120 $T run workloads/matmul.tsl --target isa/targets/$1.yaml --shape M=1000,N=776,K=520 --tile $2 2>&1 |
        grep -E "tile|verified|MISMATCH|error|us/call" | head -4
      echo "rc=${PIPESTATUS[0]}"
    done
    echo "== sm90 --tile m=256/128,n=128/64,k=64/16 (cannot run: exit 1 expected)"
    timeout 60 $T run workloads/matmul.tsl --target isa/targets/sm90.yaml --shape M=1000,N=776,K=520 --tile m=256/128,n=128/64,k=64/16 2>&1 | tail -2
    echo "rc=${PIPESTATUS[0]}"
  } > $OUT/plans.log 2>&1
  echo "== plans"; cat $OUT/plans.log
fi

if has bench; then
  t0=$(stamp)
  timeout 420 $T bench gpu --json $OUT/bench.json > $OUT/bench.log 2>&1
  echo "bench gpu (shortlist): rc=$? $(since $t0) s" | tee -a $OUT/bench.log
  grep -A40 "tessel bench gpu on" $OUT/bench.log | head -45
  if [ -n "${EXHAUSTIVE_FILTER:-}" ]; then
    t0=$(stamp)
    TESSEL_BENCH_FILTER=$EXHAUSTIVE_FILTER timeout 420 $T bench gpu --exhaustive --json $OUT/bench_exhaustive.json > $OUT/bench_exhaustive.log 2>&1
    echo "bench gpu --exhaustive ($EXHAUSTIVE_FILTER): rc=$? $(since $t0) s" | tee -a $OUT/bench_exhaustive.log
    grep -A20 "tessel bench gpu on" $OUT/bench_exhaustive.log | head -24
  fi
fi

if has attention; then
  A=tests/gpu_emit/data/attention_causal_bshd.tsl
  {
    for t in sm90 sm75; do
      echo "== $t"; timeout 240 $T run $A --target isa/targets/$t.yaml --shape B=1,S=512,H=2,D=64 2>&1 | grep -vE "^\s*$" | tail -6
    done
    echo "== memcheck sm90"
    timeout 240 compute-sanitizer --tool memcheck $T run $A --target isa/targets/sm90.yaml --shape B=1,S=512,H=2,D=64 --no-timing 2>&1 | tail -4
  } > $OUT/attention.log 2>&1
  echo "== attention"; cat $OUT/attention.log
fi

if has gputests; then
  timeout ${TEST_S:-300} $D/bin/test_gpu_emit > $OUT/test_gpu_emit.log 2>&1; echo "test_gpu_emit: rc=$?"; tail -4 $OUT/test_gpu_emit.log
fi

if has sweep; then
  export PYTHONPATH=$PWD/.pydask:${PYTHONPATH:-}
  n=${SWEEP_PLANS:-64}
  S="python3 scripts/gpu_sweep.py workloads/matmul.tsl --target isa/targets/sm90.yaml --shape M=4096,N=4096,K=4096 --limit $n --tessel $T"
  $S --gpus all --out /tmp/sweep_prime > $OUT/sweep_prime.log 2>&1; echo "prime: rc=$?"; tail -2 $OUT/sweep_prime.log
  for g in ${SWEEP_GPUS:-1 2 all}; do
    $S --gpus $g --out /tmp/sweep_$g > $OUT/sweep_$g.log 2>&1; echo "$g GPU(s): rc=$?"; tail -1 $OUT/sweep_$g.log
  done
  python3 - ${SWEEP_GPUS:-1 2 all} > $OUT/sweep.txt <<'EOF'
import json, sys
runs = [json.load(open("/tmp/sweep_%s.json" % g)) for g in sys.argv[1:]]
base = runs[0]
times = lambda r: {x["plan"]: x["us"] for x in r["results"] if x["us"]}
for r in runs:
    a, b = times(base), times(r)
    common = [p for p in a if p in b]
    diff = max(abs(b[p] / a[p] - 1) for p in common) if common else float("nan")
    print("%d plans on %d GPU(s): %.1f s, %.2fx the 1-GPU run; best %s; %d failed; largest per-plan time "
          "difference from the 1-GPU run %.1f %%" % (r["plans"], r["gpus"], r["wall_s"], base["wall_s"] / r["wall_s"],
                                                     r["best"], r["failed"], 100 * diff))
EOF
  cat $OUT/sweep.txt
  cp /tmp/sweep_all.json $OUT/sweep_all.json 2>/dev/null
fi
