#!/usr/bin/env bash
# tools/grafana-screenshot.sh — the picture of the shipped Grafana dashboard in
# docs/operating.md ("Grafana"), made from real data: starts two
# adaptalloc-demo processes as ranks 0 and 1 (each its own port and store),
# a real Prometheus on loopback with the shipped scrape job for launcher-
# written targets (examples/prometheus.yml "adaptalloc-jobs": file_sd with a
# rank label per target) pointed at those two ports and the shipped rules
# (examples/prometheus/adaptalloc-rules.yml), waits for samples, renders
# examples/grafana/adaptalloc.json through tools/grafana_preview.py (every
# variable on All) and photographs the page with Debian's chromium through
# playwright-core (tests/browser/grafana-shot.mjs). Stops everything it
# started. No Grafana server is packaged for Debian 12: the picture is the
# preview's drawing of the dashboard's panels, queries and units, not Grafana's.
#
# Usage: bash tools/grafana-screenshot.sh [BUILD_DIR] [SECONDS]
#   BUILD_DIR  where adaptalloc-demo was built (default build)
#   SECONDS    how long Prometheus scrapes before the picture (default 100)
#   AA_GRAFANA_OUT=DIR     write grafana.png (and grafana.html, grafana.json:
#                          the page and what each panel got) there; default
#                          docs/img (only the .png is kept there)
#   AA_GRAFANA_SCRAPE=5s   scrape and rule evaluation interval (the shipped
#                          config's 15 s gives too few points in a minute)
#   AA_GRAFANA_RANGE=now-2m  the time range drawn (the dashboard saves 1 h;
#                          the demo runs for a minute or two)
#   AA_GRAFANA_NO_SHOT=1   render and check only, no browser
# Exit 0 done, 1 failed, 77 prometheus, node, playwright-core or chromium
# missing (apt-get install prometheus chromium; npm ci --prefix tests/browser).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
wait_s=${2:-100}
out=${AA_GRAFANA_OUT:-docs/img}
scrape=${AA_GRAFANA_SCRAPE:-5s}
range=${AA_GRAFANA_RANGE:-now-2m}
shot=$([ "${AA_GRAFANA_NO_SHOT:-0}" = 1 ] && echo 0 || echo 1)
demo=$build/tools/adaptalloc-demo
say() { echo "grafana-screenshot: $*"; }
[ -x "$demo" ] || { say "no $demo (build first: cmake --build $build)" >&2; exit 1; }
command -v prometheus >/dev/null || { say "SKIP: no prometheus (apt-get install prometheus)"; exit 77; }
command -v python3 >/dev/null || { say "needs python3" >&2; exit 1; }
if [ "$shot" = 1 ]; then
  command -v node >/dev/null || { say "SKIP: no node"; exit 77; }
  chromium=${CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}
  [ -n "$chromium" ] || { say "SKIP: no chromium (apt-get install chromium)"; exit 77; }
  [ -d tests/browser/node_modules/playwright-core ] ||
    { say "SKIP: no playwright-core (npm ci --prefix tests/browser)"; exit 77; }
fi

tmp=$(mktemp -d)
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# two ranks, as torchrun would start them on one node (a port each)
targets=()
for r in 0 1; do
  port=$(free_port)
  RANK=$r LOCAL_RANK=$r ADAPTALLOC_HTTP=127.0.0.1:$port ADAPTALLOC_DB="$tmp/rank$r.db" \
    ADAPTALLOC_POLICY_DIR="$PWD/policies" \
    "$demo" --seconds $((wait_s + 60)) --quiet >/dev/null 2>"$tmp/demo$r.log" &
  pids+=($!)
  targets+=("{\"targets\": [\"127.0.0.1:$port\"], \"labels\": {\"node\": \"localhost\", \"local_rank\": \"$r\", \"rank\": \"$r\", \"job_id\": \"demo\"}}")
done
(IFS=,; echo "[${targets[*]}]") >"$tmp/targets.json"

# the shipped file_sd job (examples/prometheus.yml "adaptalloc-jobs") and rules,
# with the targets directory and the intervals of this run
cp examples/prometheus/adaptalloc-rules.yml "$tmp/adaptalloc-rules.yml"
cat >"$tmp/prometheus.yml" <<EOF
global:
  scrape_interval: $scrape
  scrape_timeout: $scrape
  evaluation_interval: $scrape
rule_files:
  - adaptalloc-rules.yml
scrape_configs:
  - job_name: adaptalloc-jobs
    metrics_path: /metrics
    file_sd_configs:
      - files: ['$tmp/targets.json']
        refresh_interval: 1m
    relabel_configs:
      - source_labels: [node, local_rank]
        separator: ':'
        target_label: instance
EOF
pport=$(free_port)
prom=http://127.0.0.1:$pport
prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/tsdb" \
  --web.listen-address=127.0.0.1:$pport >/dev/null 2>"$tmp/prometheus.log" &
pids+=($!)

# both ranks up
up=0
for _ in $(seq 200); do
  n=$(curl -fsS "$prom/api/v1/query" --data-urlencode 'query=count(up == 1)' 2>/dev/null |
    python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else 0)' \
    2>/dev/null || echo 0)
  [ "$n" = 2 ] && { up=1; break; }
  for p in "${pids[@]}"; do
    kill -0 "$p" 2>/dev/null || { cat "$tmp"/*.log >&2; say "a process exited early" >&2; exit 1; }
  done
  sleep 0.2
done
[ "$up" = 1 ] || { tail -5 "$tmp/prometheus.log" >&2; say "the two ranks were not scraped in 40 s" >&2; exit 1; }
say "Prometheus at $prom scraping ranks 0 and 1 every $scrape; waiting ${wait_s} s"
sleep "$wait_s"

mkdir -p "$out"
html=$tmp/grafana.html
report=$tmp/grafana.json
rc=0
python3 tools/grafana_preview.py --prometheus "$prom" \
  --dashboard examples/grafana/adaptalloc.json --from "$range" --to now \
  --out "$html" --report "$report" --expect rank=0,1 || rc=$?
if [ "$rc" != 0 ] && [ "$rc" != 1 ]; then exit "$rc"; fi
if [ "$out" != docs/img ]; then cp "$html" "$report" "$out/"; fi
if [ "$shot" = 1 ]; then
  node tests/browser/grafana-shot.mjs --html "$html" --out "$out/grafana.png" --chromium "$chromium"
fi
exit "$rc"
