#!/usr/bin/env bash
# Installs the Debian packages tessel needs that are missing; idempotent, one `apt-get update` at
# most, nothing downloaded from anywhere but Debian's archive. The CUDA toolkit is optional and is
# picked up from /usr/local/cuda when present (the GPU backend is skipped otherwise).
set -euo pipefail

packages=(
  g++ cmake ninja-build pkg-config            # toolchain
  libsystemc-dev                              # NPU simulator
  libisl-dev libgmp-dev                       # polyhedral core
  libboost-graph-dev                          # sync dependence graphs
  libyaml-cpp-dev nlohmann-json3-dev libcli11-dev libfmt-dev
  doctest-dev                                 # tests
  libxgboost-dev                              # tuner's learned cost model (optional at build time)
  python3 python3-numpy python3-matplotlib    # scripts and plots
  pybind11-dev python3-pybind11 python3-dev   # the Python module (build/python/tessel)
  python3-distributed                         # Dask: sweeps, tuning batches, design-space exploration
  clang libclang-rt-14-dev                    # libFuzzer (scripts/fuzz.sh)
  libonnx-dev libprotobuf-dev python3-onnx libonnx-testdata  # tessel import (compiler/onnx) and ONNX's backend tests
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
