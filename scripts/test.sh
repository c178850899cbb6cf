#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and runs every test suite with ctest. Extra arguments go to ctest,
# e.g. scripts/test.sh -R kernels
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# Multi-rank tests run Open MPI as root inside containers.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
ctest --test-dir "${MWB_BUILD_DIR:-build}" --output-on-failure --parallel "$(nproc)" "$@"
