#!/usr/bin/env bash
# tools/run-tests.sh — the README's test command; CI (.ci/run) runs exactly
# this. Installs the Debian packages that are missing (tools/install-deps.sh),
# builds in build-test/ (RelWithDebInfo; the demo's Release build in build/
# is left alone) and runs the whole suite: cmocka, scripts, the browser test.
#
# Usage: bash tools/run-tests.sh [ctest options...]   e.g. -R replay
#   AA_BUILD_DIR=DIR  build somewhere else than build-test/
set -euo pipefail
cd "$(dirname "$0")/.."
build=${AA_BUILD_DIR:-build-test}
bash tools/install-deps.sh
# The browser test's one npm dependency (playwright-core; it drives Debian's
# chromium). Without node or the registry the browser test skips. Installed
# again when package-lock.json changed since (npm ci's own copy of it in
# node_modules is older or missing): a dependency added there would
# otherwise be missing from a checkout that ran the tests before.
lock=tests/browser/package-lock.json
if command -v npm >/dev/null && [ "$lock" -nt tests/browser/node_modules/.package-lock.json ]; then
  npm ci --prefix tests/browser --no-audit --no-fund --loglevel=error || true
fi
# The Grafana dashboard's schema check (test_http_grafana_schema): Grafana's
# published schema (@grafana/schema) and the TypeScript compiler, pinned by
# tests/grafana/package-lock.json; without them that test skips.
lock=tests/grafana/package-lock.json
if command -v npm >/dev/null && [ "$lock" -nt tests/grafana/node_modules/.package-lock.json ]; then
  npm ci --prefix tests/grafana --no-audit --no-fund --loglevel=error || true
fi
cuda=()
if [ -x /usr/local/cuda/bin/nvcc ] && ! command -v nvcc >/dev/null 2>&1; then
  cuda=(-DCUDAToolkit_ROOT=/usr/local/cuda)
fi
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo "${cuda[@]}" >/dev/null
cmake --build "$build" -j"$(nproc)"
ctest --test-dir "$build" --output-on-failure -j"$(nproc)" "$@"
