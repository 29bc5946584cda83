#!/bin/bash
# tools/device/zoo-account.sh — runs ON the device machine, after
# `tools/device/gpu-run.sh pkginstall build` (the package installed, the
# replay tool built): where the reserved bytes go, from each workload's own
# trace (issue #24 item 2).
#
#   1. each named zoo workload runs once under adaptalloc's native allocator
#      (default policy) with its event trace kept (ADAPTALLOC_TRACE=1, every
#      run in one store; --no-fork, so each run's process exits normally and
#      writes its trace out);
#   2. each run's trace is replayed under the same default policy
#      (adaptalloc-replay run --db --run --json) at several stream-event
#      delays (how long a stream's work takes to complete after the CPU
#      queued it: 0 = at once, the GPU never behind), and the pool's account
#      at its peak in use and at its peak reserved is kept: requested,
#      rounding, slab free slots and tails, holes, stream holds, thread
#      caches; then each trace again under a limit of 1.03x and 1.05x its
#      replay's peak in use (what closing the holes costs).
#
# Usage: tools/device/zoo-account.sh OUTDIR [WORKLOADS]
#   OUTDIR/zoo_trace.json  the runs' figures (bench_zoo.py's JSON)
#   OUTDIR/account.json    per workload: the run's GPU figures, its trace's
#                          counts and one replay result per delay
#   AA_ACCOUNT_DELAYS_US   the delays (default 0,1000,10000,50000,200000)
#   AA_ACCOUNT_BUDGET_S    bench_zoo's --budget-s for the runs (default 240)
# Then: python3 tools/device/zoo_account.py --report OUTDIR/account.json
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
out=${1:?usage: zoo-account.sh OUTDIR [WORKLOADS]}
wls=${2:-sidepipe,ddp,fsdp,prefetch,kvgen,gpt2,moe,serve}
mkdir -p "$out"
work=/tmp/aa-account
rm -rf "$work" && mkdir -p "$work"
py=$(python3 -c 'import sys; print("python3" if sys.prefix != sys.base_prefix else "/tmp/aa-pkg-venv/bin/python")')
env -u LD_LIBRARY_PATH "$py" bench/gpu/bench_zoo.py --no-fork --no-jit-warm --modes native@tr \
  --native-variant "tr:ADAPTALLOC_TRACE=1,ADAPTALLOC_DB=$work/traces.db" --workloads "$wls" \
  --reps 1 --budget-s "${AA_ACCOUNT_BUDGET_S:-240}" --timeout-s 120 --out "$out/zoo_trace.json"
python3 tools/device/zoo_account.py --db "$work/traces.db" --runs "$out/zoo_trace.json" \
  --replay "${AA_BUILD_DIR:-$root/build-device}/tools/adaptalloc-replay" \
  --policy policies/default.json --delays-us "${AA_ACCOUNT_DELAYS_US:-0,1000,10000,50000,200000}" \
  --out "$out/account.json"
