#!/usr/bin/env bash
# Builds the libFuzzer targets with clang -fsanitize=fuzzer,address, outside the CMake build, and
# runs each for a bounded time on a seed corpus of the project's own files:
#   parser     compiler/fuzz/fuzz_parser.cc     the .tsl front end (+ the interpreter on small
#              programs); seeds: workloads and the malformed programs               SECONDS (45)
#   npu        compiler/fuzz/fuzz_npu.cc        the .npu assembler and the simulator; seeds: the
#              example and test programs                        TESSEL_FUZZ_NPU_SECONDS (30)
#   hierarchy  compiler/fuzz/fuzz_hierarchy.cc  the description loader; seeds: the targets and the
#              malformed descriptions                           TESSEL_FUZZ_YAML_SECONDS (20)
# Any crash, sanitizer report, InternalError or hang fails (exit 1, reproducer under build/fuzz/).
#   bash scripts/fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-45}"
out="${TESSEL_FUZZ_DIR:-build/fuzz}"
cxx="${CXX_FUZZ:-clang++}"
if ! command -v "$cxx" >/dev/null; then
  echo "fuzz: $cxx not found (scripts/setup.sh installs clang and libclang-rt-14-dev)" >&2
  exit 1
fi
flags=(-std=c++20 -O1 -g -fsanitize=fuzzer-no-link,address -fno-omit-frame-pointer -I.
       -DTESSEL_SOURCE_DIR="\"$PWD\"" -DSC_CPLUSPLUS=201703L -DFMT_SHARED)
# The simulator runs each pipe on a SystemC coroutine stack whose switches AddressSanitizer does not
# see: a coroutine left mid-frame when a simulation ends or throws keeps its frames' redzone poison in
# memory a later coroutine stack reuses. fuzz_npu then reported errors inside ASan itself (a
# stack-use-after-scope in its sigaltstack call; a failed "kCurrentStackFrameMagic" check under a
# memset of a fresh stack object), never reproducible from the input alone (clean-clone CI at aaa053b
# and ebb714b). Its objects carry no stack instrumentation; heap and global checks stay.
npu_flags=(-fno-sanitize-address-use-after-scope -mllvm -asan-stack=0)

# One object per source and flag set, rebuilt when the source or any header of the project is newer.
object() {
  local s=$1 o dir
  dir="$out/obj-$(echo "${flags[*]} ${extra_flags[*]}" | md5sum | cut -c1-8)"  # never mix flag sets
  mkdir -p "$dir"
  o="$dir/$(echo "$s" | tr / _).o"
  if [ ! -f "$o" ] || [ "$s" -nt "$o" ] ||
     [ -n "$(find compiler isa npu_sim -newer "$o" -name '*.h' -o -newer "$o" -name '*.def' 2>/dev/null | head -1)" ]; then
    "$cxx" "${flags[@]}" "${extra_flags[@]}" -c "$s" -o "$o"
  fi
  echo "$o"
}

# build NAME SOURCES... -- LIBS...
# The objects are compiled TESSEL_JOBS (2) at a time (one at a time took 200 s of the 2-core CI);
# a failed compile is compiled again, alone, by the second loop, whose failure stops the script.
build() {
  local name=$1; shift
  local sources=() objects=() libs=() s
  while [ $# -gt 0 ] && [ "$1" != -- ]; do sources+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  libs=("$@")
  for s in "${sources[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "${TESSEL_JOBS:-2}" ]; do wait -n || true; done
    object "$s" >/dev/null &
  done
  wait
  for s in "${sources[@]}"; do objects+=("$(object "$s")"); done
  "$cxx" -fsanitize=fuzzer,address "${objects[@]}" "${libs[@]}" -o "$out/fuzz_$name"
}

# run NAME SECONDS MAX_LEN LIBFUZZER_FLAG SEEDS...
run() {
  local name=$1 secs=$2 max_len=$3 extra=$4; shift 4
  [ "$secs" = 0 ] && return 0
  rm -rf "$out/corpus_$name"; mkdir -p "$out/corpus_$name" "$out/found_$name"
  local i=0 f
  for f in "$@"; do i=$((i + 1)); cp "$f" "$out/corpus_$name/$i-$(basename "$f")"; done
  echo "fuzz: running the $name fuzzer for ${secs}s"
  # Fresh findings go to a scratch corpus so the seed corpus stays the checked-in files.
  set +e
  local asan=""
  [ "$extra" = -detect_leaks=0 ] && asan=detect_leaks=0  # also LeakSanitizer's check at exit
  ASAN_OPTIONS="${ASAN_OPTIONS:-$asan}" "$out/fuzz_$name" -max_total_time="$secs" -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$out/${name}_" -print_final_stats=1 $extra "$out/found_$name" "$out/corpus_$name" > "$out/$name.log" 2>&1
  local status=$?
  set -e
  tail -n 8 "$out/$name.log"
  if [ "$status" -ne 0 ]; then
    echo "fuzz: the $name fuzzer found a problem (exit $status); reproducer under $out/${name}_*, log $out/$name.log" >&2
    exit 1
  fi
}

base=(isa/base/error.cc isa/base/dtype.cc isa/base/npy.cc isa/base/file_io.cc)
isa=(isa/hierarchy.cc isa/hierarchy_override.cc isa/hierarchy_report.cc isa/npu_machine.cc isa/npu_isa.cc isa/npu_program.cc
     isa/npu_footprint.cc isa/gpu_machine.cc isa/measured_figures.cc)
extra_flags=()
build parser compiler/fuzz/fuzz_parser.cc compiler/frontend/diagnostics.cc compiler/frontend/lexer.cc \
  compiler/frontend/parser.cc compiler/frontend/lower.cc compiler/frontend/frontend.cc \
  compiler/interp/interpreter.cc compiler/interp/error_scale.cc compiler/interp/tensor_inputs.cc compiler/ir/tensor_ir.cc "${base[@]}"
build hierarchy compiler/fuzz/fuzz_hierarchy.cc "${isa[@]}" "${base[@]}" -- -lyaml-cpp -lfmt
extra_flags=("${npu_flags[@]}")
build npu compiler/fuzz/fuzz_npu.cc npu_sim/simulator.cc npu_sim/semantics.cc npu_sim/race_detector.cc npu_sim/report.cc \
  npu_sim/systemc_info.cc npu_sim/sc_main.cc "${isa[@]}" "${base[@]}" -- -lsystemc -lyaml-cpp -lfmt

run parser "$seconds" 4096 "" workloads/*.tsl tests/errors/tsl/*.tsl
# SystemC keeps the kernel's per-run bookkeeping (spawned processes' names and handles) for the
# process's life: LeakSanitizer's end-of-input check would report it on every input; the RSS
# limit still catches a run that grows without bound.
run npu "${TESSEL_FUZZ_NPU_SECONDS:-30}" 4096 -detect_leaks=0 npu_sim/examples/*.npu $(find tests -name '*.npu')
run hierarchy "${TESSEL_FUZZ_YAML_SECONDS:-20}" 8192 "" isa/targets/*.yaml tests/errors/hierarchy/*.yaml tests/cli/hierarchy/*.yaml
echo "fuzz: nothing found"
