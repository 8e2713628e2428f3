#!/usr/bin/env bash
# Builds the parser fuzzer (compiler/fuzz/fuzz_parser.cc) with clang -fsanitize=fuzzer,address,
# outside the CMake build, and runs it for SECONDS (default 45) on a seed corpus made of the
# workloads and the malformed programs. Any crash, sanitizer report, InternalError or hang fails.
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
mkdir -p "$out/corpus" "$out/obj"
sources=(compiler/fuzz/fuzz_parser.cc compiler/frontend/diagnostics.cc compiler/frontend/lexer.cc
         compiler/frontend/parser.cc compiler/frontend/lower.cc compiler/frontend/frontend.cc
         compiler/interp/interpreter.cc compiler/ir/tensor_ir.cc
         isa/base/error.cc isa/base/dtype.cc isa/base/npy.cc isa/base/file_io.cc)
flags=(-std=c++20 -O1 -g -fsanitize=fuzzer,address -fno-omit-frame-pointer -I. -DTESSEL_SOURCE_DIR="\"$PWD\"")
objects=()
for s in "${sources[@]}"; do  # one object per source, rebuilt when the source is newer
  o="$out/obj/$(echo "$s" | tr / _).o"
  if [ ! -f "$o" ] || [ "$s" -nt "$o" ] || [ -n "$(find compiler/frontend compiler/interp compiler/ir isa/base -newer "$o" -name '*.h' 2>/dev/null | head -1)" ]; then
    if [ "$s" = compiler/fuzz/fuzz_parser.cc ]; then
      "$cxx" "${flags[@]}" -c "$s" -o "$o"
    else
      "$cxx" "${flags[@]/-fsanitize=fuzzer,address/-fsanitize=fuzzer-no-link,address}" -c "$s" -o "$o"
    fi
  fi
  objects+=("$o")
done
"$cxx" -fsanitize=fuzzer,address "${objects[@]}" -o "$out/fuzz_parser"
cp workloads/*.tsl tests/errors/tsl/*.tsl "$out/corpus/"
echo "fuzz: running the parser fuzzer for ${seconds}s"
# Fresh findings go to a scratch corpus so the seed corpus stays the checked-in files.
mkdir -p "$out/found"
"$out/fuzz_parser" -max_total_time="$seconds" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
  -artifact_prefix="$out/" -print_final_stats=1 "$out/found" "$out/corpus" 2>&1 | tail -n 15
status=${PIPESTATUS[0]}
if [ "$status" -ne 0 ]; then
  echo "fuzz: the fuzzer found a problem (exit $status); reproducer under $out/" >&2
  exit 1
fi
echo "fuzz: nothing found"
