#!/bin/bash
# tools/device/util-run.sh — runs ON the device machine, in one call: issue
# #36's utilisation table and the allocation traces behind it.
#
#   1. the package installed when adaptalloc's native allocator is not
#      importable (AA_PKG_TESTS=0 tools/device/package-test.sh);
#   2. bench: bench_zoo.py on the workloads (one process per run) under
#      adaptalloc (native), adaptalloc with stitching (native@st: the default
#      policy with pools.device.large.stitch true, written to /tmp/stitch.json)
#      and PyTorch's default, expandable segments and cudaMallocAsync; then
#      bench/gpu/zoo_report.py --util-table: per workload and allocator the
#      driver's peak, max_memory_reserved / max_memory_allocated, utilisation,
#      the ratio to the best PyTorch setting, backend calls per step from the
#      fifth step on;
#   3. capture: each workload once more under PyTorch's default with
#      torch.cuda.memory._record_memory_history (bench_zoo.py --capture),
#      each snapshot converted to the replay's CSV
#      (tools/torch_snapshot_to_trace.py) and gzipped, beside that run's figures
#      (WORKLOAD-default.json: steps, peak, max_memory_reserved / allocated):
#      the traces bench/replay/util_table.py replays on any CPU.
# The whole stays inside AA_UTIL_BUDGET_S: a part, or a run, that would not
# fit is skipped and said so in the log (bench_zoo's --budget-s).
#
# Usage (repository root, .deps carried): tools/device/util-run.sh
#   AA_UTIL_BUDGET_S            seconds for everything (default 540)
#   AA_UTIL_WORKLOADS           the bench's workloads, in this order (default
#                               the four new ones, then the ten, those with
#                               the most holes in section 13's account first)
#   AA_UTIL_MODES               default native,native@st,native@pl,native@sp,default,
#                               expandable,async
#   AA_UTIL_REPS                repetitions (default 1)
#   AA_UTIL_PARTS               bench,capture (default both, in that order)
#   AA_UTIL_CAPTURE_WORKLOADS   the captured workloads (default AA_UTIL_WORKLOADS)
#   AA_UTIL_CAPTURE_S           seconds kept for the capture when both parts
#                               run (default 150)
#   AA_UTIL_RUN_TIMEOUT_S       limit of one run (default 90)
#   AA_UTIL_REINSTALL=1         install the package even when it is importable
# Output in $OUT (without $OUT: ./gpu-out/), at most 8 files:
#   log.txt         everything printed
#   util.md         the utilisation table (markdown)
#   zoo.json        bench_zoo.py --out (or bench.log, its RESULT lines, when
#                   the bench was cut short and wrote no JSON)
#   traces-N.tar    WORKLOAD-default.csv.gz + WORKLOAD-default.json, packed
#                   into tars of at most 15 MiB (the device's limit per file)
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 1
out=${OUT:-$root/gpu-out}
work=/tmp/aa-util
mkdir -p "$out"
rm -rf "$work" && mkdir -p "$work/capture" "$work/traces" "$work/pkg"
export PYTHONUNBUFFERED=1
budget=${AA_UTIL_BUDGET_S:-540}
wls=${AA_UTIL_WORKLOADS:-phases,shapes,offload,vit,moe,gpt2,serve,sidepipe,prefetch,ddp,fsdp,encoder,cnn,kvgen}
modes=${AA_UTIL_MODES:-native,native@st,native@pl,native@sp,default,expandable,async}
reps=${AA_UTIL_REPS:-1}
parts=${AA_UTIL_PARTS:-bench,capture}
cwls=${AA_UTIL_CAPTURE_WORKLOADS:-$wls}
capture_s=${AA_UTIL_CAPTURE_S:-150}
run_limit=${AA_UTIL_RUN_TIMEOUT_S:-90}
t_start=$SECONDS

left() { echo $(( budget - (SECONDS - t_start) )); }
want() { case ",$parts," in *",$1,"*) return 0 ;; esac; return 1; }
# the interpreter with the package: python3 when it is a virtual environment
# (the package goes into it), else package-test.sh's /tmp/aa-pkg-venv
pkg_python() {
  python3 -c 'import sys; print("python3" if sys.prefix != sys.base_prefix else "/tmp/aa-pkg-venv/bin/python")'
}
# convert PICKLE: a captured snapshot into traces/NAME.csv.gz beside its
# run's figures (NAME.json); the pickle removed
convert() {
  local p=$1 name
  name=$(basename "${1%.pickle}")
  if python3 tools/torch_snapshot_to_trace.py "$p" -o "$work/traces/$name.csv"; then
    gzip -f "$work/traces/$name.csv"
    [ -f "${p%.pickle}.json" ] && cp "${p%.pickle}.json" "$work/traces/"
    echo "util-run: $name.csv.gz $(stat -c %s "$work/traces/$name.csv.gz") bytes"
  fi
  rm -f "$p"
}
native_ok() { # outside the repository: its torch/ folder must not shadow PyTorch
  env -u LD_LIBRARY_PATH -C /tmp "$1" -c \
    'import sys, adaptalloc.torch as t; ok, why = t.native_available(); print("native:", ok, why); sys.exit(0 if ok else 1)'
}

{
  echo "=== util-run $(date -u +%H:%M:%S) budget ${budget}s, parts $parts"
  echo "workloads $wls"
  echo "modes $modes, reps $reps; captured: $cwls"
  git log --oneline -1 2>/dev/null || echo "(no git)"
  nvidia-smi -L
  python3 -c 'import torch, transformers, torchvision; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__, "torchvision", torchvision.__version__)'

  py=$(pkg_python)
  if [ "${AA_UTIL_REINSTALL:-0}" != 1 ] && native_ok "$py"; then
    echo "=== install: adaptalloc's native allocator importable from $py: not installed again"
  else
    lim=$(( $(left) < 330 ? $(left) : 330 ))
    echo "=== install (limit ${lim}s, elapsed $(( SECONDS - t_start ))s)"
    t0=$SECONDS
    timeout -k 5 "$lim" env -u LD_LIBRARY_PATH OUT="$work/pkg" AA_PKG_TESTS=0 bash tools/device/package-test.sh
    echo "=== install: rc=$? in $(( SECONDS - t0 ))s"
    py=$(pkg_python)
    native_ok "$py" || echo "util-run: the native allocator is not importable from $py: the native modes will fail"
  fi

  # the variants' policies: the default with, in the device pool, stitching
  # (native@st), the learned plan (native@pl), both (native@sp)
  python3 - "$root/policies/default.json" <<'PY'
import json, sys
for name, keys in (("stitch", ("stitch",)), ("plan", ("plan",)), ("stitchplan", ("stitch", "plan"))):
    p = json.load(open(sys.argv[1]))
    for k in keys:
        p["pools"]["device"]["large"][k] = True
    p["name"] = "default-" + name
    p.pop("$schema", None)
    json.dump(p, open(f"/tmp/{name}.json", "w"), indent=1)
PY
  echo "util-run: /tmp/{stitch,plan,stitchplan}.json: policies/default.json with pools.device.large.{stitch,plan,both} true"

  if want bench; then
    b=$(left)
    want capture && b=$(( b - capture_s ))
    if [ "$b" -lt 60 ]; then
      echo "=== bench: SKIPPED (${b}s left for it)"
    else
      # bench_zoo starts no run its earlier runs say would end after --budget-s;
      # a workload's first run has no such figure, hence the margin; the
      # timeout is the last resort (a killed bench writes no JSON: the log's
      # RESULT lines stand in)
      echo "=== bench (budget $(( b - 45 ))s, limit $(( b + 30 ))s, elapsed $(( SECONDS - t_start ))s) $(date -u +%H:%M:%S)"
      t0=$SECONDS
      timeout -k 10 $(( b + 30 )) env -u LD_LIBRARY_PATH "$py" bench/gpu/bench_zoo.py \
        --reps "$reps" --no-jit-warm --workloads "$wls" --modes "$modes" \
        --native-variant st:ADAPTALLOC_POLICY=/tmp/stitch.json \
        --native-variant pl:ADAPTALLOC_POLICY=/tmp/plan.json \
        --native-variant sp:ADAPTALLOC_POLICY=/tmp/stitchplan.json \
        --budget-s $(( b - 45 )) --timeout-s "$run_limit" --out "$work/zoo.json" | tee "$work/bench.log"
      rc=${PIPESTATUS[0]}
      echo "=== bench: rc=$rc in $(( SECONDS - t0 ))s"
      [ "$rc" = 124 ] && sleep 5  # a run's process may still be ending
    fi
    src="$work/zoo.json"
    if [ -s "$src" ]; then
      cp "$src" "$out/zoo.json"
    else
      src="$work/bench.log"
      [ -s "$src" ] && cp "$src" "$out/bench.log"
    fi
    if [ -s "$src" ]; then
      python3 bench/gpu/zoo_report.py --util-table "$src" > "$out/util.md"
      echo "=== utilisation table (from $(basename "$src")): rc=$?"
      cat "$out/util.md"
    fi
  fi

  if want capture; then
    b=$(left)
    if [ "$b" -lt 45 ]; then
      echo "=== capture: SKIPPED (${b}s left)"
    else
      # each snapshot converted while the next workload runs: a run's JSON is
      # written after its pickle, so a pickle with its JSON beside it is whole
      ( while [ ! -f "$work/capture.done" ]; do
          for j in "$work"/capture/*.json; do
            [ -f "${j%.json}.pickle" ] && convert "${j%.json}.pickle"
          done
          sleep 2
        done ) &
      conv=$!
      # --budget-s: no capture starts after it; the rest is for one run and
      # the last conversions
      echo "=== capture (budget $(( b - 75 ))s, limit $(( b - 15 ))s, elapsed $(( SECONDS - t_start ))s) $(date -u +%H:%M:%S)"
      t0=$SECONDS
      timeout -k 10 $(( b - 15 )) env -u LD_LIBRARY_PATH "$py" bench/gpu/bench_zoo.py \
        --capture "$work/capture" --capture-modes default --workloads "$cwls" \
        --budget-s $(( b - 75 > 1 ? b - 75 : 1 )) --timeout-s "$run_limit"
      echo "=== capture: rc=$? in $(( SECONDS - t0 ))s"
      touch "$work/capture.done"
      wait "$conv"
    fi
    for p in "$work"/capture/*.pickle; do
      [ -f "$p" ] && convert "$p"
    done
    # into tars of at most 15 MiB (a file back from the device: 16 MiB at most)
    python3 - "$work/traces" "$out" <<'PY'
import os, sys, tarfile
src, out = sys.argv[1], sys.argv[2]
names = sorted(n for n in os.listdir(src) if n.endswith(".csv.gz"))
cap, packs, cur, size = 15 << 20, [], [], 0
for n in names:
    group = [n] + [j for j in [n[:-len(".csv.gz")] + ".json"] if os.path.exists(os.path.join(src, j))]
    sz = sum(os.path.getsize(os.path.join(src, x)) for x in group) + 4096
    if sz > cap:
        print(f"util-run: {n}: {sz} bytes, over the 15 MiB a file may have: left out")
        continue
    if cur and size + sz > cap:
        packs.append(cur)
        cur, size = [], 0
    cur += group
    size += sz
if cur:
    packs.append(cur)
for k, group in enumerate(packs[:4], 1):
    with tarfile.open(os.path.join(out, f"traces-{k}.tar"), "w") as t:
        for x in group:
            t.add(os.path.join(src, x), arcname=x)
    print(f"util-run: traces-{k}.tar: {', '.join(x for x in group if x.endswith('.gz'))}")
for group in packs[4:]:
    print("util-run: left out (more than 4 tars): " + ", ".join(group))
PY
  fi
  echo "=== util-run done in $(( SECONDS - t_start ))s"
} 2>&1 | tee "$out/log.txt"
exit 0
