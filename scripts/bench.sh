#!/usr/bin/env bash
# Benchmarks (not tests): sets up, installs PyTorch for the side-by-side comparison, then runs the op
# timings and the training benchmark (mwb-train vs PyTorch, OpenBLAS pinned and unpinned).
# Results are printed; docs/performance.md records them with the date and the machine.
#   scripts/bench.sh [--quick]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  apt-get install -y -qq --no-install-recommends python3-torch >/dev/null
fi
build="${MWB_BUILD_DIR:-build}"
echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
echo "== op timings (OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset})"
"$build/benchmarks/mwb-bench-ops"
echo "== training: mwb-train vs PyTorch"
/usr/bin/python3 benchmarks/run_benchmarks.py "$build" --json "$build/benchmark-results.json" "$@"
