#!/bin/bash
# tools/device/setup.sh — runs ON the device machine (no registry there):
# unpacks the .deb files that tools/device/fetch-deps.sh put in .deps/ into a
# private prefix (never into /), then configures and builds adaptalloc WITH
# CUDA in build-device/ using -DCMAKE_PREFIX_PATH so that CMake's
# find_path/find_library fallback (cmake/AADeps.cmake) finds the headers.
#
# Usage (from the repository root, carry .deps):
#   tools/device/setup.sh [extra cmake args...]
# Prints the lines to export for running programs that need the unpacked
# libraries (LD_LIBRARY_PATH) and writes them to build-device/env.sh.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
prefix=${AA_DEPS_PREFIX:-/tmp/aa-deps}
build=${AA_BUILD_DIR:-$root/build-device}
jobs=${AA_JOBS:-$(nproc)}

if ! ls "$root"/.deps/*.deb >/dev/null 2>&1; then
  echo "setup: no .deb files in $root/.deps (run tools/device/fetch-deps.sh here and carry .deps)" >&2
  exit 1
fi
mkdir -p "$prefix"
for f in "$root"/.deps/*.deb; do
  dpkg -x "$f" "$prefix"
done
libdir="$prefix/usr/lib/x86_64-linux-gnu"
echo "setup: unpacked $(ls "$root"/.deps/*.deb | wc -l) packages into $prefix"

if command -v ninja >/dev/null; then gen=Ninja; keep="-k 0"; else gen="Unix Makefiles"; keep="-k"; fi
cmake -S "$root" -B "$build" -G "$gen" \
  -DCMAKE_BUILD_TYPE=Release \
  -DAA_WITH_CUDA=ON \
  -DCMAKE_PREFIX_PATH="$prefix/usr" \
  -DCMAKE_LIBRARY_PATH="$libdir" \
  -DCMAKE_BUILD_RPATH="$libdir" \
  "$@"
# -k 0: keep building the other targets when one fails (another module's
# half-written code must not stop the CUDA targets from being built).
cmake --build "$build" -j "$jobs" -- $keep || echo "setup: some targets failed to build (see above)"

cat > "$build/env.sh" <<ENV
export LD_LIBRARY_PATH="$libdir:$build:$build/torch\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export AA_TORCH_LIB="$build/torch/libadaptalloc_torch.so"
ENV
echo "setup: built in $build; source $build/env.sh"
