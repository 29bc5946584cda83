#!/usr/bin/env bash
# Builds adaptalloc and runs its whole test suite (cmocka + browser tests).
# This is the README's test command; CI runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)"
ctest --test-dir build --output-on-failure -j"$(nproc)"
