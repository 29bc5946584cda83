#!/usr/bin/env bash
# Runs every libFuzzer target in BUILD_DIR for SECONDS each, starting from its
# committed corpus (tests/fuzz/corpus/<name>/), and reports executions.
#   bash tests/fuzz/run.sh build-fuzz 20
set -euo pipefail
build=${1:?build dir}; secs=${2:-20}
here=$(cd "$(dirname "$0")" && pwd)
status=0
for bin in "$build"/tests/fuzz/fuzz_* "$build"/fuzz_*; do
  [ -x "$bin" ] || continue
  name=$(basename "$bin"); short=${name#fuzz_}
  work=$(mktemp -d)
  corpus="$here/corpus/$short"
  mkdir -p "$work/corpus"
  [ -d "$corpus" ] && cp -r "$corpus"/. "$work/corpus/" 2>/dev/null || true
  if "$bin" -max_total_time="$secs" -max_len=65536 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$work/" "$work/corpus" >"$work/log" 2>&1; then
    execs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$work/log" | grep -Eo '[0-9]+$' || true)
    [ -n "$execs" ] || execs=$(grep -Eo '^Done [0-9]+ runs' "$work/log" | grep -Eo '[0-9]+' || true)
    echo "fuzz $short: ok, ${execs:-?} executions in ${secs}s"
  else
    echo "fuzz $short: FAILED"; tail -40 "$work/log"; ls "$work"
    status=1
  fi
  rm -rf "$work"
done
exit $status
