#!/bin/bash
# On a GPU machine with BUILD/dev carried (scripts/gpu_pack.sh): times the row kernels of
# workloads/bert.tsl and vector.tsl at BERT sizes with the default tiles and with given row tiles
# (--tile), CUDA graphs (`tessel run --report`), to choose how many rows a SIMT block takes.
D=${1:-build/dev}
source "$(dirname "$0")/gpu_env.sh"
T=$D/bin/tessel
for spec in "bert.tsl softmax M=4096,N=768" "bert.tsl layer_norm M=4096,N=768" "bert.tsl softmax M=4096,N=3072" "bert.tsl layer_norm M=4096,N=3072"; do
  set -- $spec
  N=${3##*N=}
  for t in default 1 2 4 8; do
    extra=""; [ $t != default ] && extra="--tile m=$t/$t,n=$N/$N"
    $T run workloads/$1 --def $2 --target isa/targets/sm90.yaml --shape $3 $extra --report /tmp/r.json > /tmp/o.txt 2>&1
    python3 -c "
import json
try: r=json.load(open('/tmp/r.json')); print('$2 $3 rows=$t', 'graph_us=%.2f' % r['graph_us'])
except Exception: print('$2 $3 rows=$t', open('/tmp/o.txt').read().strip().splitlines()[-1][:150])
"
    rm -f /tmp/r.json
  done
done
