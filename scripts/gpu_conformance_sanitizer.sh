#!/bin/bash
# On a GPU machine, from the repository root, with BUILD/dev carried (scripts/gpu_pack.sh): the GPU
# correctness checks in one call (conformance suite, compute-sanitizer, GPU tests) and the memory-bound
# and PyTorch comparisons. Writes under $OUT:
#   conformance.json / conformance.txt  the whole conformance suite on sm90 and sm75 (verify only)
#   sanitizer.txt                       compute-sanitizer racecheck + memcheck: every SIMT kernel of
#                                       a conformance sample and the row kernels, a TensorCore sample
#   peers.json / peers.txt              scripts/gpu_peers.py (tessel vs PyTorch, CUDA graphs)
#   test_gpu_emit.log                   the GPU-side tests
#   bench_memory_bound.{txt,json}       tessel bench gpu's memory-bound table
D=${1:-build/dev}
OUT=${OUT:-/tmp/tessel-gpu-out}
mkdir -p $OUT
source "$(dirname "$0")/gpu_env.sh"
T=$PWD/$D/bin/tessel
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
if [ "${GPUTESTS:-1}" = 1 ]; then  # the GPU-side tests: every small-suite workload and the TensorCore cases verified
  timeout ${GPUTESTS_S:-240} $D/bin/test_gpu_emit > $OUT/test_gpu_emit.log 2>&1; echo "test_gpu_emit rc=$?"; tail -4 $OUT/test_gpu_emit.log
fi
if [ "${MEMBENCH:-1}" = 1 ]; then  # tessel bench gpu's memory-bound table (fraction of a device-to-device copy)
  TESSEL_BENCH_FILTER=memory_bound timeout 200 $T bench gpu --json $OUT/bench_memory_bound.json > $OUT/bench_memory_bound.txt 2>&1
  echo "bench memory_bound rc=$?"; tail -16 $OUT/bench_memory_bound.txt
fi
if [ "${PEERS:-1}" = 1 ]; then
  timeout ${PEERS_S:-200} python3 scripts/gpu_peers.py --tessel $T --json $OUT/peers.json > $OUT/peers.txt 2>&1; echo "peers rc=$?"; cat $OUT/peers.txt
fi
if [ "${CONF:-1}" = 1 ]; then
  timeout ${CONF_S:-240} /usr/bin/python3 scripts/conformance.py --tessel $T --targets sm90,sm75 --jobs 12 --timeout 100 \
    --json $OUT/conformance.json > $OUT/conformance.txt 2>&1; echo "conformance rc=$?"; tail -40 $OUT/conformance.txt
fi
if [ "${SAN:-1}" = 1 ]; then
  # one line per run: tool target file def shape -> summary lines and the verification word
  san() {
    local r; r=$(timeout 150 compute-sanitizer --tool $1 --print-limit 5 $T run $3 --def $4 --target isa/targets/$2.yaml --shape $5 --no-timing 2>&1)
    echo "$1 $2 $4 $5: $(echo "$r" | grep -E "ERROR SUMMARY|RACECHECK SUMMARY" | tr '\n' ' ') $(echo "$r" | grep -oE ': verified|MISMATCH' | head -1)"
  }
  export -f san; export T
  mkdir -p /tmp/conf && /usr/bin/python3 scripts/conformance_gen.py --out /tmp/conf > /dev/null
  {
    for tool in racecheck memcheck; do
      for t in sm90 sm75; do
        echo "$tool $t workloads/bert.tsl layer_norm M=64,N=768"
        # row kernels: a block per row with the next row prefetched (rows 37 > blocks of the grid on
        # a small problem: each block walks several rows), and odd rows
        echo "$tool $t workloads/bert.tsl layer_norm M=600,N=3072"
        echo "$tool $t workloads/bert.tsl softmax M=37,N=1000"
        echo "$tool $t workloads/bert.tsl softmax M=64,N=1024"
        echo "$tool $t workloads/vector.tsl bias_gelu M=64,N=512"
        echo "$tool $t workloads/vector.tsl transpose2d M=96,N=80"
        echo "$tool $t workloads/matmul.tsl matmul M=128,N=96,K=64"
        echo "$tool $t workloads/gemm_layouts.tsl matmul_tn M=100,N=60,K=40"
        echo "$tool $t workloads/quasi.tsl pixel_shuffle N=2,CI=13,H=3,W=4"
        # long reductions in two phases (poly::split_reductions): a guard on the last chunk, rows, several axes
        echo "$tool $t workloads/vector.tsl total N=1000003"
        echo "$tool $t workloads/vector.tsl row_sum M=4,N=300001"
        echo "$tool $t workloads/batch_norm.tsl bn_reduce N=32,H=28,W=28,C=64"
      done
    done
    # small (non-large) conformance instances on sm90 under racecheck, one per 3 (SIMT and TensorCore)
    /usr/bin/python3 -c "
import json
for j, i in enumerate(json.load(open('/tmp/conf/manifest.json'))):
    if not i['large'] and j % 3 == 0: print('racecheck sm90 /tmp/conf/' + i['name'] + '.tsl', i['def_name'], ','.join(f'{k}={v}' for k, v in i['shape'].items()))
"
  } > /tmp/san_jobs.txt
  timeout ${SAN_S:-300} xargs -P 12 -L 1 bash -c 'san "$@"' _ < /tmp/san_jobs.txt > $OUT/sanitizer.txt 2>&1
  echo "sanitizer: $(grep -c . $OUT/sanitizer.txt) of $(wc -l < /tmp/san_jobs.txt) runs; not clean: $(grep -vcE '(ERROR|RACECHECK) SUMMARY: 0 ' $OUT/sanitizer.txt)"
  grep -vE '(ERROR|RACECHECK) SUMMARY: 0 ' $OUT/sanitizer.txt | head -20
  echo "not verified: $(grep -vc ': verified' $OUT/sanitizer.txt)"
fi
