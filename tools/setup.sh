#!/usr/bin/env bash
# tools/setup.sh — the README's set-up command: installs the Debian packages
# that are missing (tools/install-deps.sh), builds a Release build in build/
# (CUDA backends and the PyTorch plugin when the CUDA Toolkit is found, e.g.
# at /usr/local/cuda) and runs the demo with its dashboard at
# http://127.0.0.1:9100/.
#
# Usage: bash tools/setup.sh [demo options...]   (default: --seconds 30)
#   AA_BUILD_DIR=DIR  build somewhere else than build/
# The tests build in their own folder (tools/run-tests.sh: build-test/).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${AA_BUILD_DIR:-build}
bash tools/install-deps.sh
cuda=()
if [ -x /usr/local/cuda/bin/nvcc ] && ! command -v nvcc >/dev/null 2>&1; then
  cuda=(-DCUDAToolkit_ROOT=/usr/local/cuda)
fi
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release "${cuda[@]}"
cmake --build "$build" -j"$(nproc)"
[ $# -eq 0 ] && set -- --seconds 30
exec "$build/tools/adaptalloc-demo" "$@"
