#!/usr/bin/env bash
# Configures and builds tessel with Ninja into ./build (two jobs: the CI machine has two cores).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "${TESSEL_JOBS:-2}"
