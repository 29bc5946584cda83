#!/usr/bin/env bash
# tools/screenshots.sh — regenerates the dashboard pictures of the docs
# (docs/img/dashboard*.png) and their structure file (docs/img/
# dashboard.layout.json) from the real demo, so that they cannot go stale:
# starts adaptalloc-demo with the HTTP server on a free port and a scratch
# store, lets it run for a while (history, loop decisions), then drives
# Debian's chromium headless through playwright-core
# (tests/browser/screenshots.mjs). The browser test fails when the page's
# structure drifts from the structure file: run this then and commit both.
#
# Usage: bash tools/screenshots.sh [BUILD_DIR] [SECONDS]
#   BUILD_DIR  where adaptalloc-demo was built (default build)
#   SECONDS    how long the demo runs before the pictures (default 40)
#   AA_SHOTS_DIR=DIR  write somewhere else than docs/img
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
wait_s=${2:-40}
out=${AA_SHOTS_DIR:-docs/img}
demo=$build/tools/adaptalloc-demo
[ -x "$demo" ] || { echo "screenshots: no $demo (build first: cmake --build $build)" >&2; exit 1; }
command -v node >/dev/null || { echo "screenshots: needs node" >&2; exit 1; }
if [ ! -d tests/browser/node_modules/playwright-core ]; then
  npm ci --prefix tests/browser --no-audit --no-fund --loglevel=error
fi
tmp=$(mktemp -d)
pid=
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill "$pid"; wait "$pid" || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
ADAPTALLOC_HTTP=127.0.0.1:0 ADAPTALLOC_DB="$tmp/demo.db" ADAPTALLOC_QUIET=1 \
  "$demo" --seconds $((wait_s + 60)) >"$tmp/out" 2>"$tmp/err" &
pid=$!
url=
for _ in $(seq 100); do
  url=$(grep -o 'http://127\.0\.0\.1:[0-9]*/' "$tmp/err" "$tmp/out" 2>/dev/null | head -1 | cut -d: -f2- || true)
  [ -n "$url" ] && break
  kill -0 "$pid" 2>/dev/null || { cat "$tmp/err" >&2; echo "screenshots: the demo exited" >&2; exit 1; }
  sleep 0.1
done
[ -n "$url" ] || { cat "$tmp/err" >&2; echo "screenshots: the demo printed no address" >&2; exit 1; }
echo "screenshots: demo at $url, waiting ${wait_s} s"
sleep "$wait_s"
node tests/browser/screenshots.mjs --url "$url" --out "$out"
