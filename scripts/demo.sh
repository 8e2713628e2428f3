#!/usr/bin/env bash
# The README's main job: set-up, build, then the headline demo.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
tessel=build/compiler/cli/tessel
$tessel --version
$tessel check-hierarchy isa/targets/davinci-910.yaml
echo
$tessel check-hierarchy isa/targets/sm90.yaml
echo
$tessel check-hierarchy isa/targets/davinci-910.yaml isa/targets/sm90.yaml
