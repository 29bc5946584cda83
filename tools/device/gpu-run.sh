#!/bin/bash
# tools/device/gpu-run.sh — runs ON the device machine: build with CUDA (via
# setup.sh), the cmocka suite, compute-sanitizer on the CUDA tests, the
# PyTorch plugin's GPU tests and the GPU benchmarks. Each stage has its own
# time limit and a failing stage does not stop the next.
#
# Usage: tools/device/gpu-run.sh [STAGE...]     (default: all stages)
#   stages: info build ctest (or ctestcuda: the CUDA tests only) sanitize example gputests native pair pinned scenarios
#           bert bertcudahalf maxbatch gpt2 zoo, and (not in the default list) bertpolicy and
#           maxbatchpolicy: ours only, with the default policy instead of
#           policies/bert-base.json; zoocapture: the zoo's workloads under PyTorch's
#           default and expandable allocators with their allocation traces
#           (CSV, for the replay's PyTorch model) and figures; package: the Python
#           package installed and tested (tools/device/package-test.sh); pkgbench:
#           its pinned-pool benchmark (bench/gpu/bench_py_pinned.py); nativebench: the
#           native allocator against PyTorch's settings (bench/gpu/bench_native.py, after native);
#           pkginstall pkgtests sidetests zooside viz loopgpu: issue #24's side-stream, history and
#           loop measurements (see below);
#           managed: managed memory: test_core_managed on the GPU (after build), the package
#           installed, tests/gpu/test_managed.py; managedbench: bench/gpu/bench_managed_optim.py
#           (the package installed first when it is not importable)
#           maxbatch3: the package installed, then the largest batch / sequence under one
#           cap for adaptalloc, default and expandable (bench/gpu/bench_maxbatch.py)
#           ddp2: the package installed (unless importable), then tests/gpu/test_ddp_ranks.py:
#           two gloo ranks sharing GPU 0, with and without adaptalloc (a few MiB each)
#           ddp: the package installed (unless importable), then tools/device/ddp-run.sh: GPT-2
#           small over NCCL on 2 GPUs with and without adaptalloc, per-rank peaks and the loss
#           comparison; with fewer than 2 GPUs it says SKIPPED and runs nothing
# Output: $OUT/log.txt (everything) and $OUT/results.tar.gz (JSON, CSV);
# without $OUT, into ./gpu-out/.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
out=${OUT:-$root/gpu-out}
res=/tmp/aa-results
mkdir -p "$out" "$res"
build=${AA_BUILD_DIR:-$root/build-device}
export PYTHONUNBUFFERED=1
export ADAPTALLOC_DB=${ADAPTALLOC_DB:-off}
export ADAPTALLOC_HTTP=${ADAPTALLOC_HTTP:-off}
export AA_BENCH_BUILD=/tmp/aa-bench
export ADAPTALLOC_POLICY_DIR=${ADAPTALLOC_POLICY_DIR:-$root/policies}
t_start=$(date +%s)
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(info build ctest sanitize example gputests native pair pinned scenarios bert bertcudahalf maxbatch gpt2 zoo)
budget=${AA_GPU_BUDGET_S:-560}   # stop starting stages after this many seconds

stage() { # name limit_s command...
  local name=$1 lim=$2
  shift 2
  local el=$(( $(date +%s) - t_start ))
  if [ $(( el + 10 )) -ge "$budget" ]; then
    echo "=== $name: SKIPPED (elapsed ${el}s, budget ${budget}s)"
    return 0
  fi
  echo "=== $name (limit ${lim}s, elapsed ${el}s) $(date -u +%H:%M:%S)"
  local t0=$(date +%s)
  timeout -k 5 "$lim" "$@"
  local rc=$?
  echo "=== $name: rc=$rc in $(( $(date +%s) - t0 ))s"
}

want() { local s; for s in "${stages[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1; }

# variant OUT NAME STATEMENT: policies/default.json changed by a Python
# statement on `p`, renamed NAME, written to OUT (a native@ variant's policy)
variant() {
  python3 - "$root/policies/default.json" "$1" "$2" "$3" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
exec(sys.argv[4])
p["name"] = sys.argv[3]
p.pop("$schema", None)
json.dump(p, open(sys.argv[2], "w"))
PY
}

{
  if want info; then
    nvidia-smi -L; nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv
    python3 -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__)'
    nproc; uname -r
  fi
  want build && stage build 240 tools/device/setup.sh -DAA_BUILD_BENCH=ON
  [ -f "$build/env.sh" ] && source "$build/env.sh"
  # the package installed, no tests: first, for every stage that imports it
  want pkginstall && stage pkginstall 300 env -u LD_LIBRARY_PATH AA_PKG_TESTS=0 bash tools/device/package-test.sh
  want ctestcuda && stage ctest-cuda 120 ctest --test-dir "$build" -L cuda --output-on-failure --timeout 60
  if want ctest; then
    stage ctest-cuda 120 ctest --test-dir "$build" -L cuda --output-on-failure --timeout 60
    stage ctest-all 150 ctest --test-dir "$build" -j 16 --timeout 90 -LE cuda --output-on-failure
  fi
  if want sanitize && command -v compute-sanitizer >/dev/null; then
    for t in test_cuda_backend test_cuda_pinned; do
      stage "memcheck-$t" 90 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 "$build/tests/$t"
    done
  fi
  if want example; then
    stage example-process 60 python3 examples/torch_pluggable.py process
    stage example-mempool 60 python3 examples/torch_pluggable.py mempool
  fi
  want gputests && stage gputests 300 python3 tests/gpu/test_torch_plugin.py
  if want native; then
    # the package installed as the package stage does (no tests), then the
    # native allocator's GPU tests, with the package's own library
    stage native-install 300 env -u LD_LIBRARY_PATH AA_PKG_TESTS=0 bash tools/device/package-test.sh
    stage native-tests 400 env -u LD_LIBRARY_PATH -C /tmp python3 -m pytest -v -rs \
      -p no:cacheprovider "$root/tests/gpu/test_torch_native.py"
  fi
  # managed memory: the C tests on the GPU (after build), the package's GPU
  # tests (a pytest process of their own) and the optimizer-state benchmark;
  # every allocation stays below free device memory (docs/cuda.md)
  mpy=$(python3 -c 'import sys; print("python3" if sys.prefix != sys.base_prefix else "/tmp/aa-pkg-venv/bin/python")')
  if want managed; then
    [ -x "$build/tests/test_core_managed" ] && stage managed-ctest 120 "$build/tests/test_core_managed"
    want pkginstall ||
      stage managed-install 300 env -u LD_LIBRARY_PATH AA_PKG_TESTS=0 bash tools/device/package-test.sh
    stage managed-tests 300 env -u LD_LIBRARY_PATH -C /tmp $mpy -m pytest -v -rs \
      -p no:cacheprovider "$root/tests/gpu/test_managed.py"
  fi
  if want managedbench; then
    env -u LD_LIBRARY_PATH -C /tmp $mpy -c 'import adaptalloc.torch' 2>/dev/null ||
      stage managed-install 300 env -u LD_LIBRARY_PATH AA_PKG_TESTS=0 bash tools/device/package-test.sh
    stage managed-bench 400 env -u LD_LIBRARY_PATH $mpy bench/gpu/bench_managed_optim.py \
      --reps ${AA_REPS_MANAGED:-20} --json $res/managed_optim.json
  fi
  # issue #25 item 4: two ranks on one GPU (gloo), and the 2-GPU NCCL run
  if want ddp2 || want ddp; then
    env -u LD_LIBRARY_PATH -C /tmp $mpy -c 'import adaptalloc.torch' 2>/dev/null ||
      stage ddp-install 300 env -u LD_LIBRARY_PATH AA_PKG_TESTS=0 bash tools/device/package-test.sh
  fi
  if want ddp2; then
    if env -C /tmp $mpy -c 'import pytest' 2>/dev/null; then
      stage ddp2 300 env -u LD_LIBRARY_PATH -C /tmp $mpy -m pytest -v -s -rs \
        -p no:cacheprovider "$root/tests/gpu/test_ddp_ranks.py"
    else
      stage ddp2 300 env -u LD_LIBRARY_PATH -C /tmp $mpy "$root/tests/gpu/test_ddp_ranks.py"
    fi
  fi
  want ddp && stage ddp 400 env -u LD_LIBRARY_PATH -u ADAPTALLOC_DB -u ADAPTALLOC_HTTP \
    bash tools/device/ddp-run.sh $mpy $res/ddp
  # the native allocator against PyTorch's three settings (after `native`,
  # which installs the package)
  want nativebench && stage nativebench 400 env -u LD_LIBRARY_PATH python3 bench/gpu/bench_native.py \
    --reps ${AA_REPS_NATIVE:-3} --out $res/native.json
  want pair && stage pair 120 python3 bench/gpu/bench_pair.py --reps ${AA_REPS_PAIR:-7} --out $res/pair.json
  if want pinned; then
    gcc -O2 -std=c11 bench/gpu/bench_pinned.c -Icore/include -Itransfer/include -I/usr/local/cuda/include \
      "$build/libadaptalloc_static.a" -L/usr/local/cuda/lib64 -lcudart -lpthread -lm \
      -o /tmp/bench_pinned && stage pinned 120 /tmp/bench_pinned 7 $res/timeline.csv
  fi
  want bert && stage bert 200 env ADAPTALLOC_MODEL=bert-base \
    python3 bench/gpu/bench_bert.py latency --reps ${AA_REPS_BERT:-3} --modes ${AA_BERT_MODES:-ours,default} --out $res/bert.json
  want bertcudahalf && stage bertcudahalf 200 env ADAPTALLOC_MODEL=bert-base \
    python3 bench/gpu/bench_bert.py latency --load cuda-half --reps ${AA_REPS_BERT:-3} --modes ${AA_BERT_MODES:-ours,default} --out $res/bert_cuda_half.json
  want maxbatch && stage maxbatch 200 env ADAPTALLOC_MODEL=bert-base \
    python3 bench/gpu/bench_bert.py maxbatch --cap-gib 2 --start ${AA_MB_START:-128} --step ${AA_MB_STEP:-32} --out $res/maxbatch.json
  want bertpolicy && stage bertpolicy 150 env ADAPTALLOC_MODEL=default \
    python3 bench/gpu/bench_bert.py latency --modes ours --reps ${AA_REPS_BERTPOL:-2} --out $res/bert_defaultpolicy.json
  want maxbatchpolicy && stage maxbatchpolicy 150 env ADAPTALLOC_MODEL=default \
    python3 bench/gpu/bench_bert.py maxbatch --modes ours --cap-gib 2 --start ${AA_MB_START:-128} --step ${AA_MB_STEP:-32} --out $res/maxbatch_defaultpolicy.json
  want gpt2 && stage gpt2 200 env ADAPTALLOC_MODEL=gpt2-small ADAPTALLOC_DB=/tmp/aa-results/gpt2.db ADAPTALLOC_HTTP=127.0.0.1:0 \
    python3 bench/gpu/bench_gpt2.py --steps ${AA_GPT2_STEPS:-200} --runs ${AA_GPT2_RUNS:-ours,default,default2} --out $res/gpt2.json --stats-out $res/gpt2_stats.json
  want scenarios && stage scenarios 150 python3 bench/gpu/bench_scenarios.py --reps ${AA_REPS_SCEN:-5} --out $res/scenarios.json
  # the zoo's native mode is the installed package's allocator: install it first
  # (into python3 when that is a virtual environment, else /tmp/aa-pkg-venv)
  want zoo && stage zoo ${AA_ZOO_LIMIT_S:-420} env -u LD_LIBRARY_PATH bash -c \
    "AA_PKG_TESTS=0 bash tools/device/package-test.sh &&
     py=\$(python3 -c 'import sys; print(\"python3\" if sys.prefix != sys.base_prefix else \"/tmp/aa-pkg-venv/bin/python\")') &&
     \$py bench/gpu/bench_zoo.py --reps ${AA_REPS_ZOO:-2} --budget-s ${AA_ZOO_BUDGET_S:-320} --timeout-s 120 --workloads ${AA_ZOO_WORKLOADS:-kvgen,cnn,encoder,gpt2,moe,serve} --out $res/zoo.json"
  # Issue #24's side-stream measurements, each after `pkginstall` (the package
  # installed, no tests): zooside the four side-stream zoo workloads under
  # adaptalloc and PyTorch's three settings; sidetests the native GPU tests of
  # side-stream reuse, memory history and the export; viz memory_viz's
  # timeline of a native training loop (pickle + HTML + torch's MemoryViz.js,
  # for tools/memory_viz_image.py --png anywhere); loopgpu the zoo's native
  # mode with the loop on and off (ADAPTALLOC_POLICY: adapt.enabled false)
  # and PyTorch's default and expandable (AA_LOOP_MODES) on AA_LOOP_WORKLOADS
  # (default burst: bench/gpu/zoo_workloads.py, about 50 s a run; the table
  # "memory after a burst"), with the audit trail in each run's stats
  # pkgtests: chosen tests of the package (after pkginstall), AA_PKGTESTS
  # files and AA_PKGTESTS_K the -k expression
  want pkgtests && stage pkgtests ${AA_PKGTESTS_LIMIT_S:-200} env -u LD_LIBRARY_PATH -C /tmp python3 -m pytest -q -rs \
    -p no:cacheprovider $(for f in ${AA_PKGTESTS:-tests/gpu/test_package_torch.py tests/gpu/test_regions.py}; do echo "$root/$f"; done) \
    -k "${AA_PKGTESTS_K:-oom_snapshot or prefill_beyond or region_limit}"
  want sidetests && stage sidetests 200 env -u LD_LIBRARY_PATH -C /tmp python3 -m pytest -q -rs \
    "$root/tests/gpu/test_torch_native.py" -k "side_stream or history or export or record_stream or stream_wait"
  # (native@nowait: the default policy with large.stream_wait false in every
  # pool, PyTorch's rule for blocks pending on other streams)
  if want zooside; then
    variant /tmp/aa-nowait.json default-nowait \
      'for sec in p["pools"].values(): sec.get("large", {}).update(stream_wait=False)'
    stage zooside ${AA_ZOOSIDE_LIMIT_S:-330} env -u LD_LIBRARY_PATH python3 bench/gpu/bench_zoo.py \
      --reps ${AA_REPS_ZOO:-1} --budget-s ${AA_ZOOSIDE_BUDGET_S:-300} --timeout-s 100 \
      --workloads ${AA_ZOOSIDE_WORKLOADS:-sidepipe,ddp,fsdp,prefetch} \
      --modes ${AA_ZOOSIDE_MODES:-native,native@nowait,default,expandable,async} \
      --native-variant nowait:ADAPTALLOC_POLICY=/tmp/aa-nowait.json --out $res/zoo_side.json
  fi
  if want viz; then
    stage viz 120 env -u LD_LIBRARY_PATH python3 tools/memory_viz_image.py --out-dir "$res/viz"
    python3 -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "utils", "viz", "MemoryViz.js"))' \
      | xargs -I{} cp {} "$res/viz/" 2>/dev/null || echo "viz: torch's MemoryViz.js not found"
  fi
  if want loopgpu; then
    variant /tmp/aa-loop-off.json default-loop-off 'p["adapt"]["enabled"] = False'
    stage loopgpu ${AA_LOOP_LIMIT_S:-330} env -u LD_LIBRARY_PATH python3 bench/gpu/bench_zoo.py \
      --reps ${AA_REPS_LOOP:-1} --budget-s ${AA_LOOP_BUDGET_S:-300} --timeout-s 100 \
      --workloads ${AA_LOOP_WORKLOADS:-burst} --modes ${AA_LOOP_MODES:-native,native@off,default,expandable} \
      --native-variant off:ADAPTALLOC_POLICY=/tmp/aa-loop-off.json --out $res/zoo_loop.json
  fi
  # the largest batch under one cap (issue 24 item 3): the installed package's
  # native allocator against PyTorch's default and expandable segments; the
  # benchmark's budget is AA_MB3_BUDGET_S (420) or what the install left of
  # 520 s, whichever is less, so the stage ends inside one 10-minute call
  # (after `pkginstall` in the same call the package is not installed again)
  mb3_install="AA_PKG_TESTS=0 bash tools/device/package-test.sh"
  want pkginstall && mb3_install="echo maxbatch3: the package pkginstall installed"
  want maxbatch3 && stage maxbatch3 ${AA_MB3_LIMIT_S:-560} env -u LD_LIBRARY_PATH bash -c \
    "t0=\$SECONDS && $mb3_install &&
     py=\$(python3 -c 'import sys; print(\"python3\" if sys.prefix != sys.base_prefix else \"/tmp/aa-pkg-venv/bin/python\")') &&
     b=\$(( 520 - (SECONDS - t0) )) && b=\$(( b < ${AA_MB3_BUDGET_S:-420} ? b : ${AA_MB3_BUDGET_S:-420} )) &&
     echo \"maxbatch3: install took \$(( SECONDS - t0 )) s; budget \$b s\" &&
     \$py bench/gpu/bench_maxbatch.py --budget-s \$b --workloads ${AA_MB3_WORKLOADS:-bert,gpt2,gpt2seq,cnn} --out $res/maxbatch3.json"
  if want zoocapture; then
    stage zoocapture 200 python3 bench/gpu/bench_zoo.py --capture $res/zoo-traces --workloads ${AA_ZOO_CAPTURE:-kvgen,cnn}
    for p in "$res"/zoo-traces/*.pickle; do
      [ -f "$p" ] || continue
      python3 tools/torch_snapshot_to_trace.py "$p" -o "${p%.pickle}.csv" && gzip -f "${p%.pickle}.csv" && rm -f "$p"
    done
  fi
  # The Python package: pip install offline, tests/gpu/test_package_torch.py
  # (+ tests/python when pytest is there); pkgbench adds bench_py_pinned.py.
  # Without build-device/ on LD_LIBRARY_PATH: the package uses its own library.
  want package && stage package 300 env -u LD_LIBRARY_PATH bash tools/device/package-test.sh
  want pkgbench && stage pkgbench 360 env -u LD_LIBRARY_PATH AA_PKG_BENCH=1 AA_PKG_TESTS=0 \
    bash tools/device/package-test.sh
  [ -f "$out/py_pinned.json" ] && cp "$out/py_pinned.json" "$res/"
  echo "=== done in $(( $(date +%s) - t_start ))s"
} 2>&1 | tee "$out/log.txt"
tar -czf "$out/results.tar.gz" -C "$res" . 2>/dev/null
exit 0
