#!/usr/bin/env bash
# tools/soak.sh — soak test: adaptalloc-demo with the store, the policy loop
# and the HTTP server on, /stats under wrk load, a policy PATCH over HTTP
# every second, the demo's resident memory (VmRSS) and the pools' reserved
# bytes sampled every few seconds.
#
# At the end it checks:
#   - the demo exits 0 after SIGTERM;
#   - wrk saw no socket errors and no non-2xx answers, every PATCH got 200,
#     the server counted no 5xx;
#   - RSS and reserved bytes are flat after warm-up: the maximum over the last
#     third of the run is at most 110% + 8 MiB of the maximum over the warm-up
#     (the first third, and at least one whole cycle of the demo's sequence
#     lengths, 5 x --phase seconds);
# and prints one summary line ("soak: PASS ..." or "soak: FAIL ...").
#
#   tools/soak.sh [--seconds N] [--demo PATH] [--port P] [--threads N]
#                 [--connections C] [--interval S] [--phase S] [--out DIR] [--keep]
#
# Needs wrk, curl and python3 (to read /stats). Listens on loopback only.
set -uo pipefail

seconds=60
demo=""
port=0
threads=2
conns=4
interval=3
phase=4
out=""
keep=0

usage() {
  sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'
  exit "${1:-0}"
}

while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --demo) demo=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --connections) conns=$2; shift 2 ;;
    --interval) interval=$2; shift 2 ;;
    --phase) phase=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    -h|--help) usage 0 ;;
    *) echo "soak: unknown argument '$1'" >&2; usage 2 ;;
  esac
done

case "$seconds" in ''|*[!0-9]*) echo "soak: --seconds must be a whole number" >&2; exit 2 ;; esac
if [ "$seconds" -lt 10 ]; then echo "soak: --seconds must be at least 10" >&2; exit 2; fi

here=$(cd "$(dirname "$0")/.." && pwd)
if [ -z "$demo" ]; then
  for c in "$here/build/tools/adaptalloc-demo" "$here/build-rel/tools/adaptalloc-demo"; do
    if [ -x "$c" ]; then demo=$c; break; fi
  done
fi
if [ -z "$demo" ] || [ ! -x "$demo" ]; then
  echo "soak: no adaptalloc-demo (build it, or pass --demo PATH)" >&2; exit 2
fi
for t in wrk curl python3; do
  command -v "$t" >/dev/null 2>&1 || { echo "soak: $t is not installed" >&2; exit 2; }
done

if [ -z "$out" ]; then out=$(mktemp -d /tmp/aa-soak-XXXXXX); fi
mkdir -p "$out"
demo_pid=""
patch_pid=""
cleanup() {
  [ -n "$patch_pid" ] && kill "$patch_pid" 2>/dev/null
  if [ -n "$demo_pid" ] && kill -0 "$demo_pid" 2>/dev/null; then
    kill -TERM "$demo_pid" 2>/dev/null
    wait "$demo_pid" 2>/dev/null
  fi
  if [ "$keep" -eq 0 ]; then rm -rf "$out"; fi
}
trap cleanup EXIT

# ------------------------------------------------------------------ start
export ADAPTALLOC_HTTP="127.0.0.1:$port"
export ADAPTALLOC_DB="$out/soak.db"
export ADAPTALLOC_MODEL=soak
export ADAPTALLOC_POLICY_DIR="$here/policies"   # no soak.json there: the default policy, loop on
unset ADAPTALLOC_POLICY ADAPTALLOC_TOKEN ADAPTALLOC_TRACE ADAPTALLOC_QUIET
# no token set: the demo makes one and writes it to a file here (named in
# its start-up line); the PATCHes below read it, as any client does
export XDG_RUNTIME_DIR="$out"

# --seconds is a safety net; the script stops the demo with SIGTERM.
"$demo" --seconds $((seconds + 60)) --threads "$threads" --compute-us 500 --phase "$phase" \
  >"$out/demo.out" 2>"$out/demo.err" &
demo_pid=$!

base=""
for _ in $(seq 1 100); do
  line=$(grep -o 'serving on http://[0-9.]*:[0-9]*' "$out/demo.err" 2>/dev/null | head -1)
  if [ -n "$line" ]; then base=${line#serving on }; break; fi
  kill -0 "$demo_pid" 2>/dev/null || break
  sleep 0.1
done
if [ -z "$base" ]; then
  echo "soak: FAIL the demo's server did not start"; cat "$out/demo.err" >&2; exit 1
fi
base=${base%/}
case "$base" in http://127.*) ;; *) echo "soak: FAIL not a loopback address: $base"; exit 1 ;; esac
token_file=$(grep -o 'changes need the token in .*' "$out/demo.err" | head -1 | sed 's/^changes need the token in //')
if [ -z "$token_file" ] || [ ! -r "$token_file" ]; then
  echo "soak: FAIL the demo named no readable token file"; cat "$out/demo.err" >&2; exit 1
fi

# ------------------------------------------------------------------ load
# A PATCH every second, alternating two valid loop intervals.
(
  i=0
  while :; do
    v=$(( i % 2 ? 500 : 1000 ))
    code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 -X PATCH \
      -H "Authorization: Bearer $(cat "$token_file")" \
      -H 'Content-Type: application/merge-patch+json' \
      --data "{\"adapt\":{\"interval_ms\":$v}}" "$base/policy")
    echo "$code" >>"$out/patch.codes"
    i=$((i + 1))
    sleep 1
  done
) &
patch_pid=$!

wrk -t1 -c"$conns" -d"${seconds}s" --timeout 5s "$base/stats" >"$out/wrk.out" 2>&1 &
wrk_pid=$!

# Samples: seconds since start, VmRSS in KiB, reserved bytes (sum over pools).
echo "t_s,rss_kib,reserved_bytes" >"$out/samples.csv"
t0=$(date +%s)
while kill -0 "$wrk_pid" 2>/dev/null; do
  rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$demo_pid/status" 2>/dev/null)
  res=$(curl -s --max-time 5 "$base/stats" | python3 -c '
import json, sys
try:
    d = json.load(sys.stdin)
    print(sum(p.get("bytes_reserved", 0) for p in d.get("pools", [])))
except Exception:
    print("")
')
  if [ -n "$rss" ] && [ -n "$res" ]; then
    echo "$(( $(date +%s) - t0 )),$rss,$res" >>"$out/samples.csv"
  fi
  sleep "$interval"
done
wait "$wrk_pid"
kill "$patch_pid" 2>/dev/null
wait "$patch_pid" 2>/dev/null
patch_pid=""

metrics=$(curl -s --max-time 5 "$base/metrics")
http_5xx=$(printf '%s\n' "$metrics" | awk -F' ' '/^adaptalloc_http_requests_total\{code="5xx"\}/ {print $2}')
http_4xx=$(printf '%s\n' "$metrics" | awk -F' ' '/^adaptalloc_http_requests_total\{code="4xx"\}/ {print $2}')
policy_version=$(printf '%s\n' "$metrics" | awk '/^adaptalloc_policy_version / {print $2}')

kill -TERM "$demo_pid" 2>/dev/null
wait "$demo_pid"
demo_rc=$?
demo_pid=""

# ------------------------------------------------------------------ verdict
reqs=$(awk '/requests in/ {print $1}' "$out/wrk.out")
rps=$(awk '/^Requests\/sec:/ {print $2}' "$out/wrk.out")
non2xx=$(awk '/Non-2xx or 3xx responses:/ {print $NF}' "$out/wrk.out")
sockerr=$(awk '/Socket errors:/ {gsub(",", ""); print $4 + $6 + $8 + $10}' "$out/wrk.out")
patches=$(wc -l <"$out/patch.codes" 2>/dev/null || echo 0)
patch_ok=$(grep -c '^200$' "$out/patch.codes" 2>/dev/null || true)

flat=$(python3 - "$out/samples.csv" "$seconds" "$phase" <<'EOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
secs, phase = float(sys.argv[2]), float(sys.argv[3])
# Warm-up: the first third of the run, and at least one whole cycle of the
# demo's five sequence lengths (its demand peaks once a cycle).
warm = max(secs / 3, 5 * phase)
def verdict(key, scale):
    first = [int(r[key]) * scale for r in rows if float(r["t_s"]) <= warm]
    last = [int(r[key]) * scale for r in rows if float(r["t_s"]) >= secs * 2 / 3]
    v = [int(r[key]) * scale for r in rows]
    if len(first) < 2 or len(last) < 2:
        return None, "too few samples (%d)" % len(v)
    first, last = max(first), max(last)
    ok = last <= first * 1.10 + 8 * 2**20
    return ok, "%.1f->%.1f MiB (min %.1f, max %.1f)" % (
        first / 2**20, last / 2**20, min(v) / 2**20, max(v) / 2**20)
rss_ok, rss = verdict("rss_kib", 1024)
res_ok, res = verdict("reserved_bytes", 1)
print("%d|%d|%s|%s|%d" % (bool(rss_ok), bool(res_ok), rss, res, len(rows)))
EOF
)
IFS='|' read -r rss_ok res_ok rss_txt res_txt nsamples <<<"$flat"

fail=""
[ "$demo_rc" -eq 0 ] || fail="$fail demo-exit=$demo_rc"
[ -n "$reqs" ] || fail="$fail wrk-did-not-run"
[ "${non2xx:-0}" -eq 0 ] || fail="$fail non2xx=$non2xx"
[ "${sockerr:-0}" -eq 0 ] || fail="$fail socket-errors=$sockerr"
[ "$patches" -gt 0 ] && [ "$patch_ok" -eq "$patches" ] || fail="$fail patches=$patch_ok/$patches"
[ "${http_5xx:-0}" = "0" ] || fail="$fail http-5xx=$http_5xx"
[ "$rss_ok" = "1" ] || fail="$fail rss-not-flat"
[ "$res_ok" = "1" ] || fail="$fail reserved-not-flat"

status=PASS
[ -z "$fail" ] || status=FAIL
summary="soak: $status ${seconds}s demo exit $demo_rc; wrk ${reqs:-0} requests (${rps:-0}/s), ${non2xx:-0} non-2xx, ${sockerr:-0} socket errors; PATCH $patch_ok/$patches ok, policy version ${policy_version:-?}; http 4xx ${http_4xx:-?} 5xx ${http_5xx:-?}; RSS $rss_txt; reserved $res_txt; $nsamples samples"
[ -z "$fail" ] || summary="$summary; failed:$fail"
echo "$summary"
if [ "$keep" -eq 1 ]; then echo "soak: files in $out"; fi
[ "$status" = PASS ]
