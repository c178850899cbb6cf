#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and runs the main job on its embedded defaults: a small GPT trained on
# the CPU on the bundled corpus; the run directory is printed at the start. Extra arguments go to
# mwb-train (e.g. --train-iters 50).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec "${MWB_BUILD_DIR:-build}/backend/mwb-train" "$@"
