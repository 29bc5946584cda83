#!/usr/bin/env bash
# Builds adaptalloc and runs its whole test suite (cmocka + browser tests).
# This is the README's test command; CI runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
# The browser test's one npm dependency (playwright-core; it drives Debian's
# chromium). Without node or the registry the browser test skips.
if command -v npm >/dev/null && [ ! -d tests/browser/node_modules ]; then
  npm ci --prefix tests/browser --no-audit --no-fund --loglevel=error || true
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)"
ctest --test-dir build --output-on-failure -j"$(nproc)"
