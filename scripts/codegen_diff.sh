#!/usr/bin/env bash
# Compares the code two tessel binaries generate: C source (--target c), CUDA source (sm75, sm80,
# sm90) and NPU programs (davinci-910, davinci-310) for every entry of workloads/small.yaml at its
# shapes; with --gpu-suites also workloads/gemm.yaml and conv.yaml on the CUDA targets (the
# TensorCore paths at full size). A compile that fails must fail alike in both (same exit status,
# same message). Prints how many outputs were compared and which differ; exits 1 on a difference.
#
#   scripts/codegen_diff.sh BASELINE_TESSEL NEW_TESSEL [--gpu-suites] [--keep DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

[[ $# -ge 2 ]] || { echo "usage: $0 BASELINE_TESSEL NEW_TESSEL [--gpu-suites] [--keep DIR]" >&2; exit 2; }
old=$(realpath "$1")
new=$(realpath "$2")
shift 2
gpu_suites=0
work=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --gpu-suites) gpu_suites=1 ;;
    --keep) work=$2; shift ;;
    *) echo "$0: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
if [[ -z $work ]]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi
mkdir -p "$work/old" "$work/new"

# One job line per output: NAME FILE DEF SHAPE TARGET
jobs="$work/jobs"
python3 - "$gpu_suites" >"$jobs" <<'EOF'
import sys, yaml
targets = {"c": "c", "sm75": "isa/targets/sm75.yaml", "sm80": "isa/targets/sm80.yaml",
           "sm90": "isa/targets/sm90.yaml", "910": "isa/targets/davinci-910.yaml",
           "310": "isa/targets/davinci-310.yaml"}
suites = [("small", list(targets))]
if sys.argv[1] == "1":
    suites += [("gemm", ["sm75", "sm80", "sm90"]), ("conv", ["sm75", "sm80", "sm90"])]
for suite, names in suites:
    for e in yaml.safe_load(open(f"workloads/{suite}.yaml"))["entries"]:
        shape = ",".join(f"{k}={v}" for k, v in e["shape"].items())
        for t in names:
            print(f"{suite}.{e['name']}.{t} workloads/{e['file']} {e['def']} {shape} {targets[t]}")
EOF

compile_one() {  # BIN OUTDIR NAME FILE DEF SHAPE TARGET
  local bin=$1 dir=$2 name=$3
  if "$bin" compile "$4" --def "$5" --shape "$6" --target "$7" -o "$dir/$name.out" >"$dir/$name.log" 2>&1; then
    echo 0 >"$dir/$name.rc"
  else
    echo $? >"$dir/$name.rc"
  fi
  # timings are not output
  sed -i -E 's/ in [0-9.]+ ms$//; /compiled in/d' "$dir/$name.log"
}
export -f compile_one
export root
while read -r name file def shape target; do
  echo "$old $work/old $name $file $def $shape $target"
  echo "$new $work/new $name $file $def $shape $target"
done <"$jobs" | xargs -P "${TESSEL_JOBS:-2}" -L 1 bash -c 'compile_one "$@"' _

compared=0
failed_alike=0
differ=()
while read -r name _; do
  compared=$((compared + 1))
  if ! cmp -s "$work/old/$name.rc" "$work/new/$name.rc"; then
    differ+=("$name (exit status $(cat "$work/old/$name.rc") -> $(cat "$work/new/$name.rc"))")
  elif [[ $(cat "$work/old/$name.rc") != 0 ]]; then
    failed_alike=$((failed_alike + 1))
    cmp -s "$work/old/$name.log" "$work/new/$name.log" || differ+=("$name (error message)")
  elif ! cmp -s "$work/old/$name.out" "$work/new/$name.out"; then
    differ+=("$name")
  fi
done <"$jobs"

echo "codegen_diff: $compared outputs compared ($failed_alike failing alike in both), ${#differ[@]} differ"
for d in "${differ[@]}"; do echo "  differs: $d"; done
[[ ${#differ[@]} -eq 0 ]]
