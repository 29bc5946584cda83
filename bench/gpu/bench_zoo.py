#!/usr/bin/env python3
# bench_zoo.py, one concern: the harness (command line, the plan of the runs,
# main). The zoo's other concerns are its siblings bench/gpu/zoo_*.py:
# zoo_modes (modes, a run's environment), zoo_workloads, zoo_child (one
# measured run), zoo_runner (fork servers, lockstep), zoo_report (tables).
"""The GPU workload zoo: six training and inference shapes nobody tuned a
policy for, each under adaptalloc (default policy, runtime on) and PyTorch's
three allocator settings, each (workload, allocator, repetition) in a fresh
process.

    python3 bench/gpu/bench_zoo.py [--reps 2] [--workloads a,b] [--modes m,n]
                                   [--steps w=N,...] [--budget-s S] [--cpus gpu]
                                   [--lockstep] [--no-jit-warm] [--out zoo.json]
                                   [--capture DIR]
    python3 bench/gpu/bench_zoo.py --report zoo.json     # the tables again

Allocators (--modes; the default list is native,default,expandable,async):
  native      adaptalloc as a user adopts it: `adaptalloc.torch.install()`
              from the installed package (`pip install .`), its native
              allocator, the default policy (ADAPTALLOC_MODEL and
              ADAPTALLOC_POLICY unset), the runtime on: the policy loop, the
              SQLite store (a file in a temporary folder) and the HTTP server
              (127.0.0.1, a free port); --runtime loop turns store and server
              off
  pluggable   adaptalloc through the CUDAPluggableAllocator plugin of the
              CMake build (examples/torch_pluggable.py), the same policy and
              runtime (store and server off); not in the default list
  default     PyTorch's caching allocator as shipped
  expandable  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
  async       PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync
  native@NAME `native` with environment overrides, one mode per
              --native-variant NAME:VAR=VAL[,VAR=VAL...] (repeatable), e.g.
              `--native-variant cand:ADAPTALLOC_POLICY=/abs/cand.json` runs a
              candidate policy beside the default in the same call, and
              `--native-variant tr:ADAPTALLOC_TRACE=1,ADAPTALLOC_DB=/abs/t.db`
              keeps a native run's event trace (with thread ids) for
              `adaptalloc-replay run --db /abs/t.db --threads`; name the
              variant's mode in --modes (native@cand)

Workloads (random weights, fixed seeds, the same shapes for every allocator):
  kvgen    generation with a growing KV cache: a small Llama-style model
           (transformers LlamaConfig: 8 layers, hidden 1024, fp16) under HF
           generate, 32 new tokens, over four mixed (batch, prompt length)
           pairs, twice; step time over the second pass only (the first
           pass over a shape is dominated by one-off work on new shapes)
  cnn      CNN training (a ResNet-style conv net, fp32, SGD) with a batch
           size cycling 32, 64, 128, 96, 48 (128x128 images)
  encoder  variable-length encoder fine-tuning: BERT-base classification,
           AdamW, bf16 autocast, batch 16, each batch padded to a random
           length in 32..512
  gpt2     GPT-2-small language-model training, AdamW, bf16 autocast, batch 8,
           a random sequence length in 64..512 per step
  moe      a mixture-of-experts stack (8 experts, top-1 routing, bf16
           autocast) trained on batches of a random token count: every
           expert's batch has a data-dependent size
  serve    BERT-base inference (fp16, no grad) on requests of a random batch
           (1..64) and length (16..512): a server's mix
  burst    (not in the default list) kvgen's model serving prefills, one
           request every 0.1 s: 6 s of short prompts, 2 s of long-context
           ones (batch 8, 1536..2048 tokens: GiBs), 30 s of short ones; the
           memory each allocator keeps after the burst (the table "memory
           after a burst", from a time series per step; the loop's trims)
Issue #36's four (zoo_workloads.NEW_WORKLOADS; not in the default list, name
them in --workloads):
  phases   phases that alternate: a GPT-2-style LM (8 layers, vocabulary
           8192) trained at batch 16 x 256, an evaluation pass at batch 32 x
           512 (no_grad) after every third training step
  shapes   shapes that change every step: a Llama-style decoder fine-tuned
           packing-free, each step a padded length drawn from a log-normal
           (16..1536) and as many rows as fit 4096 tokens, padding masked
  offload  host offload: 6 transformer encoder layers (d 1024) whose saved
           activations go to pinned host memory and back every step
           (torch.autograd.graph.save_on_cpu(pin_memory=True))
  vit      a model family the ten lack: torchvision's VisionTransformer in
           ViT-B/16's shape at 160x160 images, batch 48, AdamW, bf16

Figures per run: peak device memory = the most of (total - free) from
torch.cuda.mem_get_info, polled every 2 ms by a thread and after every step,
minus the same figure taken after CUDA initialisation and before the first
allocation (the CUDA context), so every allocator is measured the same way
and what the driver sees is what counts (cudaMallocAsync's pool included);
step time = wall time of each step between torch.cuda.synchronize() calls,
the warm-up steps excluded (the first two; kvgen: its first pass), median
per run. Over the repetitions: the median and [min, max] of each run's peak
and of each run's median step time; ratios of the medians to PyTorch's
default and to the best (lowest peak) of PyTorch's settings.

CPU placement and speed. Python- and launch-bound steps run as fast as the
CPU their process gets, which on a virtual machine can differ by up to 2x
between processes. So every run (and every server) is pinned, before CUDA
is initialised, to one CPU set, the same for all allocators (--cpus: by
default the CPUs local to the GPU, /sys/bus/pci/devices/<bus id>/
local_cpulist with the bus id from nvidia-smi, all CPUs where that cannot
be read), and times a fixed CPU job right after CUDA initialisation and
again after the steps (bench/gpu/benchcpu.py: a pure-Python loop, ms, and
2000 in-place adds on a 16-element CPU tensor, us per op: the dispatcher
work every kernel launch pays). RESULT lines carry "cpus", "gpu_pci" and
"calib" {"before", "after"}; each run's line shows the us/op before/after.

The step table's columns, beside each allocator's step time:
  <ours> speed vs default         default's median step time / ours (ratios
                                  of the medians over the reps)
  <ours> paired speed vs default  the workloads are seeded, so step k is the
                                  same work under every allocator: in each
                                  repetition, the median over k of default's
                                  step k / ours; median [min, max] of those
                                  over the repetitions. Pairing removes the
                                  spread between steps, not a slow process
                                  (that shows in every one of its steps):
                                  read it with the process-speed table
The process-speed table: each run's us per torch CPU op (the mean of its
before and after calibrations), median [min, max] over the reps, and
<ours> / default, the median of that ratio within each repetition (above 1:
our processes ran on slower CPUs, and a speed ratio below 1 may be that),
and the CPU seconds the run's main thread and all its other threads used
during the steps (/proc/self/task: a runtime's own threads show there).
Within a repetition a workload's allocators run one after the other (the
order rotated between workloads and repetitions), so a paired ratio
compares processes started seconds apart.
--lockstep (speed only): the machine's speed also drifts within a process
(the calibration moved between 3 and 6 us/op over one run), so runs seconds
apart still differ by more than an allocator does. With --lockstep the runs
of one workload under every allocator start together, build their models at
the same time, then take turns one step at a time (bench/gpu/lockstep.py;
the order alternates between rounds, no two steps overlap): step k of each
run lies within a few hundred milliseconds of the others'. The driver's
memory figure then counts every run, so peaks are each allocator's own
max_memory_reserved; measure memory without --lockstep.
The device-calls table: each allocator's own count of device allocations
and frees over the measured steps (torch.cuda.memory_stats num_device_alloc
+ num_device_free; RESULT's "step_device_calls" has them per step), and for
adaptalloc the time spent inside its backend calls over those steps (the
pools' backend_ns: cudaMalloc/cudaFree, page maps and unmaps), the pages
mapped/unmapped, and that time as a share of the summed step time
(RESULT's "backend_measured").
The utilisation table (issue #36; not printed here: `python3
bench/gpu/zoo_report.py --util-table zoo.json`): per run max_memory_reserved,
max_memory_allocated and their ratio, and the backend calls per step from the
fifth step on -- RESULT's "from_step": the device pools' backend and alias
calls (adaptalloc) and memory_stats' counters (every allocator) taken before
the fifth step and right after the last; "torch_stats": memory_stats'
num_alloc_retries, segment counts and device calls at the end.

JIT warm-up. The first process on a machine that runs a workload pays for
compiling the GPU code it uses first (the CUDA driver's JIT, whose results
stay in a per-machine cache, ~/.nv/ComputeCache), on its main thread: on an
H200, kvgen's first pass took 3141 and 3574 ms for its first two steps in the
first process and 1949 and 1580 ms in the next one, the same allocator in
both (native with its runtime off first, on second); a third process
with an empty cache (CUDA_CACHE_PATH) again took 2767 and 3281 ms.
Every workload's first mode in the rotation paid it (encoder's step 0:
1350 ms against 436-555 in one run), so warm-up steps compared whichever
allocator happened to go first. So before a workload's first run the
harness runs its first pass once, unmeasured, under PyTorch's default (or
the first mode), and prints its step times ("JIT warm-up"); --no-jit-warm
skips it. Measured steps (after the warm-up steps) and peaks never
included the compile.

Processes: one server per allocator imports torch (and transformers) once,
with that allocator's environment (PYTORCH_CUDA_ALLOC_CONF is read when torch
loads), and forks a fresh child for every run; CUDA is first touched in the
child, so every run has its own CUDA context and allocator. --no-fork starts
a new interpreter per run instead; a run whose forked child fails is retried
that way. --budget-s S: no run starts when the runs measured so far say it
would end after S seconds from the start (repetitions run one after the
other: the first repetition of everything comes first); skipped runs are
listed.

--capture DIR: instead of the zoo, runs each workload once under `default`
and `expandable` (--capture-modes) with torch.cuda.memory._record_memory_history and writes
DIR/<workload>-<mode>.pickle and DIR/<workload>-<mode>.json (the
allocator's own max_memory_reserved / max_memory_allocated): the trace and
the figures the replay's PyTorch model is checked against
(`adaptalloc-replay compare --policy torch:default ...`).
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# The zoo by concern, beside this file (bench/gpu/zoo_*.py); the names marked
# F401 are not used here: tests reach them through this module.
import benchcpu  # noqa: E402 - bench/gpu/benchcpu.py
from zoo_child import WARM_ONLY, _backend_counts, child  # noqa: E402,F401
from zoo_modes import (DEFAULT_MODES, MODES, TORCH_MODES, VARIANTS, mode_env,  # noqa: E402,F401
                       names, parse_variant)
from zoo_report import (phase_figures, print_tables, quiet_steps,  # noqa: E402,F401
                        run_device_calls, summarise)
from zoo_runner import Runner, serve  # noqa: E402
from zoo_workloads import BUILD, NEW_WORKLOADS, WORKLOADS  # noqa: E402


def plan(reps, wls, modes):
    """The order of the runs: (rep, workload, mode). Every first repetition
    comes before any second one; within a repetition a workload's modes run
    one after the other, the order rotated between workloads and reps so no
    mode always runs first."""
    for rep in range(reps):
        for wi, w in enumerate(wls):
            k = (rep + wi) % len(modes)
            for m in modes[k:] + modes[:k]:
                yield rep, w, m


def parse_steps(text):
    """`kvgen=8,cnn=20` -> {"kvgen": 8, "cnn": 20} (N may be `warm`: the
    warm-up steps alone); exits naming a bad item."""
    out = {}
    for item in filter(None, (text or "").split(",")):
        w, eq, n = item.partition("=")
        if n == WARM_ONLY and eq and w in BUILD:
            out[w] = WARM_ONLY
            continue
        if not eq or w not in BUILD or not n.isdigit() or int(n) < 1:
            sys.exit(f"bench_zoo: --steps: {item!r} is not WORKLOAD=N with N >= 1 "
                     f"or WORKLOAD={WARM_ONLY} (workloads: {', '.join(BUILD)})")
        out[w] = int(n)
    return out


def jit_warm_mode(modes):
    """The mode of the JIT warm-up runs: PyTorch's default when it is one of
    the modes, else the first (the driver's cache is the machine's, so which
    allocator fills it does not matter)."""
    return "default" if "default" in modes else modes[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=2, help="repetitions of every run (default 2)")
    ap.add_argument("--workloads", default=",".join(WORKLOADS),
                    help="comma-separated, of " + ",".join(WORKLOADS) +
                         " (and " + ",".join(NEW_WORKLOADS) + " and burst: see above; "
                         "smoke: a few allocations, to check the harness)")
    ap.add_argument("--modes", default=",".join(DEFAULT_MODES),
                    help="comma-separated, of " + ",".join(MODES) +
                         " (default " + ",".join(DEFAULT_MODES) + ")")
    ap.add_argument("--steps", default="", help="WORKLOAD=N,...: steps of a workload")
    ap.add_argument("--native-variant", action="append", default=[],
                    metavar="NAME:VAR=VAL,...",
                    help="a mode native@NAME: native with these environment overrides "
                         "(repeatable; name it in --modes)")
    ap.add_argument("--budget-s", type=float, default=0,
                    help="start no run that would end after this many seconds (0: no limit)")
    ap.add_argument("--timeout-s", type=float, default=240, help="limit of one run")
    ap.add_argument("--runtime", choices=("full", "loop"), default="full",
                    help="native: store, server and loop on (full), or the loop alone")
    ap.add_argument("--no-fork", action="store_true",
                    help="a new interpreter per run instead of forks of a per-mode server")
    ap.add_argument("--out", default=None, help="write every run's figures as JSON here")
    ap.add_argument("--capture", default=None,
                    help="DIR: capture allocation traces under default and expandable instead")
    ap.add_argument("--capture-modes", default="default,expandable",
                    help="with --capture: which of PyTorch's settings (default "
                         "default,expandable)")
    ap.add_argument("--cpus", default="gpu",
                    help="the CPU set every run is pinned to: gpu (the CPUs local to the "
                         "GPU, else all; the default), all, none (not pinned) or a list "
                         "such as 0-7")
    ap.add_argument("--lockstep", action="store_true",
                    help="speed only: a workload's allocators run at the same time and take "
                         "turns step by step (see CPU placement and speed above); peaks are "
                         "then the allocators' own max_memory_reserved")
    ap.add_argument("--no-jit-warm", action="store_true",
                    help="skip the unmeasured first pass of each workload before its runs "
                         "(see JIT warm-up above)")
    ap.add_argument("--dry-run", action="store_true",
                    help="print the CPU set and the order of the runs, start nothing")
    ap.add_argument("--report", default=None, metavar="JSON",
                    help="print the tables of an earlier run's --out file, run nothing")
    ap.add_argument("--child", nargs=2, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--server", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.reps < 1:
        sys.exit("bench_zoo: --reps must be at least 1")
    wls = names("bench_zoo", args.workloads, list(BUILD), "workloads")
    steps = parse_steps(args.steps)
    if args.server:
        serve(args.server, wls)
        return
    if args.child:
        res = child(args.child[0], args.child[1], args.capture, steps.get(args.child[0]))
        print(json.dumps(res))
        return
    if args.report:
        with open(args.report) as f:
            doc = json.load(f)
        runs = doc["runs"]
        print_tables(summarise(runs, doc["modes"], list(runs)), doc["modes"])
        return
    for v in args.native_variant:
        m, env = parse_variant(v)
        VARIANTS[m] = env
    modes = names("bench_zoo", args.modes, MODES + list(VARIANTS), "modes")
    try:
        cpus, why = benchcpu.choose_cpus(args.cpus)
    except ValueError as e:
        sys.exit(f"bench_zoo: --cpus {args.cpus}: {e}")
    if cpus:  # inherited by the servers and every run; each run applies it again
        os.environ[benchcpu.ENV_CPUS] = benchcpu.format_cpulist(cpus)
        benchcpu.pin_cpus(cpus)
    else:
        os.environ.pop(benchcpu.ENV_CPUS, None)
    print(f"bench_zoo: CPUs {benchcpu.format_cpulist(cpus) if cpus else '-'} ({why})",
          flush=True)
    jit_warm = not args.no_jit_warm and not args.capture
    if args.dry_run:
        warmed = set()
        for rep, w, m in plan(1 if args.capture else args.reps, wls,
                              names("bench_zoo", args.capture_modes, list(TORCH_MODES), "capture-modes")
                              if args.capture else modes):
            if jit_warm and w not in warmed:
                warmed.add(w)
                print(f"  {w} JIT warm-up under {jit_warm_mode(modes)} (first pass, not "
                      "measured)")
            if args.lockstep and m != modes[(rep + wls.index(w)) % len(modes)]:
                continue
            what = "all at once, taking turns" if args.lockstep else m
            print(f"  rep {rep + 1} {w} {what}" + (f" steps {steps[w]}" if w in steps else ""))
        return
    t_start = time.time()
    if args.capture:
        cmodes = names("bench_zoo", args.capture_modes, list(TORCH_MODES), "capture-modes")
        os.makedirs(args.capture, exist_ok=True)
        runner = Runner(cmodes, wls, not args.no_fork, args.runtime, args.timeout_s)
        try:
            for w in wls:
                for m in cmodes:
                    if args.budget_s and time.time() - t_start > args.budget_s:
                        print(f"  {w}/{m}: capture skipped (budget {args.budget_s:.0f} s)",
                              flush=True)
                        continue
                    runner.run(w, m, steps.get(w), os.path.abspath(args.capture))
        finally:
            runner.close()
        return
    runner = Runner(modes, wls, not args.no_fork, args.runtime, args.timeout_s)
    runs = {w: {m: [] for m in modes} for w in wls}
    took = {}  # (workload, mode) -> seconds of its last run
    skipped = []
    warmed = set()
    try:
        if args.lockstep and args.no_fork:
            sys.exit("bench_zoo: --lockstep needs the forking servers (not --no-fork)")
        for rep, w, m in plan(args.reps, wls, modes):
            k = (rep + wls.index(w)) % len(modes)
            if jit_warm and w not in warmed:
                warmed.add(w)  # once, failed or not: a failure shows in its line
                if not args.budget_s or time.time() - t_start < args.budget_s:
                    runner.warm_jit(w, jit_warm_mode(modes))
            if args.lockstep and m != modes[k]:
                continue  # the workload's first mode of the rep runs them all
            group = modes[k:] + modes[:k] if args.lockstep else [m]
            guess = max([took.get((w, x), 0) for x in group] + [0]) or max(
                (v for (ww, _), v in took.items() if ww == w), default=0)
            if args.budget_s and time.time() - t_start + guess > args.budget_s:
                skipped += [f"{w}/{x}/rep{rep + 1}" for x in group]
                print(f"  {w}/{'+'.join(group)} rep {rep + 1}: skipped (budget "
                      f"{args.budget_s:.0f} s, elapsed {time.time() - t_start:.0f} s, a run "
                      f"takes ~{guess:.0f} s)", flush=True)
                continue
            if args.lockstep:
                got = runner.run_lockstep(w, group, steps.get(w), rep=rep)
            else:
                r = runner.run(w, m, steps.get(w), rep=rep)
                got = {m: r} if r is not None else {}
            for x, r in got.items():
                runs[w][x].append(r)
                took[(w, x)] = r["process_s"]
    finally:
        runner.close()
    summary = summarise(runs, modes, wls)
    if args.out:  # before the tables: a table that fails leaves the figures written
        with open(args.out, "w") as f:
            json.dump({"reps": args.reps, "modes": modes, "skipped": skipped,
                       "summary": summary, "runs": runs}, f, indent=1)
    print_tables(summary, modes)
    print(f"\n{time.time() - t_start:.0f} s; skipped: {', '.join(skipped) or 'none'}")


if __name__ == "__main__":
    main()
