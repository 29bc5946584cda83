#!/usr/bin/env python3
"""The GPU workload zoo: six training and inference shapes nobody tuned a
policy for, each under adaptalloc (default policy, runtime on) and PyTorch's
three allocator settings, each (workload, allocator, repetition) in a fresh
process.

    python3 bench/gpu/bench_zoo.py [--reps 2] [--workloads a,b] [--modes m,n]
                                   [--steps w=N,...] [--budget-s S] [--cpus gpu]
                                   [--lockstep] [--out zoo.json] [--capture DIR]
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
import random
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import benchcpu  # noqa: E402 - bench/gpu/benchcpu.py, beside this file
import lockstep  # noqa: E402 - bench/gpu/lockstep.py

WORKLOADS = ["kvgen", "cnn", "encoder", "gpt2", "moe", "serve"]
MODES = ["native", "pluggable", "default", "expandable", "async"]
DEFAULT_MODES = ["native", "default", "expandable", "async"]
TORCH_MODES = ("default", "expandable", "async")
OURS = ("native", "pluggable")
VARIANTS = {}  # "native@NAME" -> {VAR: VAL} (--native-variant; the runner's process only)
CONF = {"expandable": "expandable_segments:True", "async": "backend:cudaMallocAsync"}
MIB = 1 << 20
NATIVE_MISSING = "adaptalloc's native allocator is not available"
CUDA_READY = "bench_zoo: CUDA is ready in this run"
INIT_LIMIT_S = 45  # a forked run not past CUDA initialisation by then is killed


def base_mode(mode):
    """native@NAME runs as native (with its environment overrides)."""
    return mode.split("@", 1)[0]


def our_modes(modes):
    return [m for m in modes if base_mode(m) in OURS]


def parse_variant(text):
    """`NAME:VAR=VAL,VAR=VAL` -> ("native@NAME", {VAR: VAL}); exits naming
    what is wrong."""
    name, colon, assigns = text.partition(":")
    if not colon or not name or not all(ch.isalnum() or ch in "_-" for ch in name):
        sys.exit(f"bench_zoo: --native-variant {text!r}: not NAME:VAR=VAL[,VAR=VAL...] "
                 "(NAME of letters, digits, _ and -)")
    env = {}
    for a in filter(None, assigns.split(",")):
        k, eq, v = a.partition("=")
        if not eq or not k or not all(ch.isalnum() or ch == "_" for ch in k) or k[0].isdigit():
            sys.exit(f"bench_zoo: --native-variant {text!r}: {a!r} is not VAR=VAL")
        env[k] = v
    if not env:
        sys.exit(f"bench_zoo: --native-variant {text!r}: no VAR=VAL")
    return "native@" + name, env


# ---------------------------------------------------------------- workloads

def wl_kvgen(torch, dev):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816,
                      num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=4,
                      max_position_embeddings=2048)
    model = LlamaForCausalLM(cfg).half().to(dev).eval()
    pairs = [(1, 64), (16, 128), (2, 1024), (8, 384)]
    rnd = random.Random(1)

    def step(i):
        b, n = pairs[i % len(pairs)]
        ids = torch.randint(3, cfg.vocab_size, (b, n), generator=None, device=dev)
        # left padding of a random part of each row, as a batch of prompts
        mask = torch.ones(b, n, dtype=torch.long, device=dev)
        for r in range(b):
            pad = rnd.randrange(0, max(1, n // 4))
            if pad:
                mask[r, :pad] = 0
        with torch.inference_mode():
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=32,
                                 min_new_tokens=32, do_sample=False, pad_token_id=0)
        return int(out.shape[1])

    return step, 2 * len(pairs), len(pairs)


def wl_cnn(torch, dev):
    import torch.nn as nn

    torch.manual_seed(0)

    def block(cin, cout, stride):
        return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout),
                             nn.ReLU(inplace=True), nn.Conv2d(cout, cout, 3, 1, 1, bias=False),
                             nn.BatchNorm2d(cout), nn.ReLU(inplace=True))

    model = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                          block(64, 64, 1), block(64, 128, 2), block(128, 256, 2),
                          block(256, 512, 2), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(512, 1000)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    batches = [32, 64, 128, 96, 48]
    lossf = nn.CrossEntropyLoss()

    def step(i):
        b = batches[i % len(batches)]
        x = torch.randn(b, 3, 128, 128, device=dev)
        y = torch.randint(0, 1000, (b,), device=dev)
        opt.zero_grad(set_to_none=True)
        loss = lossf(model(x), y)
        loss.backward()
        opt.step()
        return b

    return step, 4 * len(batches), 2


def _bert(torch, dev, classify):
    from transformers import BertConfig, BertForSequenceClassification, BertModel

    torch.manual_seed(0)
    cfg = BertConfig()
    return (BertForSequenceClassification(cfg) if classify else BertModel(cfg)).to(dev), cfg


def wl_encoder(torch, dev):
    model, cfg = _bert(torch, dev, True)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=2e-5)
    rnd = random.Random(2)
    lens = [rnd.randrange(32, 513) for _ in range(12)]

    def step(i):
        n = lens[i % len(lens)]
        ids = torch.randint(0, cfg.vocab_size, (16, n), device=dev)
        labels = torch.randint(0, 2, (16,), device=dev)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        opt.step()
        return n

    return step, len(lens), 2


def wl_gpt2(torch, dev):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config()
    model = GPT2LMHeadModel(cfg).to(dev).train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    rnd = random.Random(3)
    lens = [rnd.choice([64, 128, 192, 256, 320, 384, 448, 512]) for _ in range(16)]

    def step(i):
        n = lens[i % len(lens)]
        ids = torch.randint(0, cfg.vocab_size, (8, n), device=dev)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        return n

    return step, len(lens), 2


def wl_moe(torch, dev):
    import torch.nn as nn

    torch.manual_seed(0)
    d, experts, layers = 1024, 8, 4

    class MoE(nn.Module):
        def __init__(self):
            super().__init__()
            self.router = nn.Linear(d, experts)
            self.w1 = nn.ModuleList(nn.Linear(d, 4 * d) for _ in range(experts))
            self.w2 = nn.ModuleList(nn.Linear(4 * d, d) for _ in range(experts))

        def forward(self, x):
            e = self.router(x).argmax(-1)
            out = torch.zeros_like(x)
            for k in range(experts):
                idx = (e == k).nonzero(as_tuple=True)[0]
                if idx.numel() == 0:
                    continue
                h = self.w2[k](torch.relu(self.w1[k](x.index_select(0, idx))))
                out = out.index_add(0, idx, h.to(out.dtype))  # h is bf16 under autocast
            return x + out

    model = nn.Sequential(*[MoE() for _ in range(layers)]).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    rnd = random.Random(4)
    counts = [rnd.randrange(1024, 16385) for _ in range(16)]

    def step(i):
        n = counts[i % len(counts)]
        x = torch.randn(n, d, device=dev)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        return n

    return step, len(counts), 2


def wl_serve(torch, dev):
    model, cfg = _bert(torch, dev, False)
    model = model.half().eval()
    rnd = random.Random(5)
    reqs = [(rnd.randrange(1, 65), rnd.randrange(16, 513)) for _ in range(40)]

    def step(i):
        b, n = reqs[i % len(reqs)]
        ids = torch.randint(0, cfg.vocab_size, (b, n), device=dev)
        with torch.inference_mode():
            h = model(input_ids=ids).last_hidden_state
        return int(h.shape[0])

    return step, len(reqs), 2


def wl_smoke(torch, dev):
    """Not a workload: a few allocations, to check the harness quickly."""

    def step(i):
        return int(torch.empty((i + 1) * MIB, dtype=torch.uint8, device=dev).numel())

    return step, 4, 1


BUILD = {"smoke": wl_smoke, "kvgen": wl_kvgen, "cnn": wl_cnn, "encoder": wl_encoder, "gpt2": wl_gpt2,
         "moe": wl_moe, "serve": wl_serve}




def preload(workloads):
    """What a server imports once for its forked children: torch and the
    transformers classes the workloads use. Nothing here touches CUDA."""
    import torch  # noqa: F401

    names = {"kvgen": ("LlamaConfig", "LlamaForCausalLM"),
             "encoder": ("BertConfig", "BertForSequenceClassification", "BertModel"),
             "serve": ("BertConfig", "BertForSequenceClassification", "BertModel"),
             "gpt2": ("GPT2Config", "GPT2LMHeadModel")}
    wanted = sorted({n for w in workloads for n in names.get(w, ())})
    if wanted:
        import transformers

        for n in wanted:
            getattr(transformers, n)


# ---------------------------------------------------------------- child

def _pool_summary(doc):
    """The device pools of adaptalloc's /stats (totals, large path, class
    table) and the loop's counters and audit: where the reserved bytes are."""
    keys = ("bytes_in_use", "bytes_requested", "bytes_reserved", "peak_bytes_in_use",
            "peak_bytes_reserved", "large_bytes_in_use", "large_bytes_reserved",
            "large_segments", "large_pages_mapped", "large_pages_unmapped", "large_bytes_held",
            "large_held_reclaims", "backend_allocs", "backend_frees", "backend_ns",
            "large_page_bytes")
    ckeys = ("block_size", "prefill", "slabs", "bytes_in_use", "bytes_reserved",
             "peak_bytes_in_use", "allocs", "misses")
    pools = []
    for p in doc.get("pools", []):
        if p.get("backend") != "cuda" and not str(p.get("name", "")).startswith("device"):
            continue  # the host and pinned pools
        d = {k: p.get(k) for k in keys}
        d.update(name=p.get("name"), backend=p.get("backend"),
                 classes=[{k: c.get(k) for k in ckeys} for c in p.get("classes", [])])
        pools.append(d)
    return {"pools": pools, "policy_version": doc.get("policy_version"),
            "adapt": doc.get("adapt") or {}}


def device_calls(torch):
    """[device allocations, device frees] so far by the allocator's own
    counters (torch.cuda.memory_stats: cudaMalloc/cudaFree for PyTorch's,
    page maps/unmaps and segments for adaptalloc's); None where it has none."""
    try:
        st = torch.cuda.memory_stats()
        return [st["num_device_alloc"], st["num_device_free"]]
    except (RuntimeError, KeyError):
        return None


def _backend_counts(doc):
    """adaptalloc's device pools, summed: time in backend calls (ms; 0 from
    a library without the figure), page maps and unmaps, backend calls."""
    out = {"backend_ms": 0.0, "pages_mapped": 0, "pages_unmapped": 0, "backend_calls": 0}
    for p in doc.get("pools", []):
        if p.get("backend") != "cuda" and not str(p.get("name", "")).startswith("device"):
            continue
        out["backend_ms"] += p.get("backend_ns", 0) / 1e6
        out["pages_mapped"] += p.get("large_pages_mapped", 0)
        out["pages_unmapped"] += p.get("large_pages_unmapped", 0)
        out["backend_calls"] += p.get("backend_allocs", 0) + p.get("backend_frees", 0)
    return out


def child(workload, mode, capture, steps=None, turns=None):
    """One run in this (fresh) process; returns its figures as a dict.
    turns: a lockstep FIFO prefix (--lockstep): each step waits its turn."""
    t_start = time.perf_counter()
    cpus = benchcpu.pin_cpus()  # before CUDA: the driver's threads inherit it
    follower = lockstep.Follower(turns) if turns else None
    import torch

    mode, variant = base_mode(mode), mode
    if mode == "native":
        import adaptalloc
        import adaptalloc.torch as aat

        got = aat.install()
        if got != "native":
            raise RuntimeError(f"adaptalloc.torch.install() gave {got!r}, not the native "
                               "allocator")
    elif mode == "pluggable":
        sys.path.insert(0, os.path.join(ROOT, "examples"))
        import torch_pluggable as tp

        tp.install()
    torch.cuda.init()
    dev = torch.device("cuda")
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    base = total - free
    print(CUDA_READY, file=sys.stderr, flush=True)
    calib_before = benchcpu.calibrate(torch)
    peak = [base]
    stop = threading.Event()

    def poll():
        while not stop.is_set():
            f, t = torch.cuda.mem_get_info()
            if t - f > peak[0]:
                peak[0] = t - f
            time.sleep(0.002)

    if capture:
        torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python",
                                                 max_entries=1 << 24)
    th = threading.Thread(target=poll, daemon=True)
    th.start()
    t_init = time.perf_counter()
    step, n, warm = BUILD[workload](torch, dev)
    if steps:
        n = steps
    warm = warm if n > warm else 0
    t_built = time.perf_counter()
    times = []
    calls = [device_calls(torch)]
    backend = {}
    cpu0 = benchcpu.thread_cpu()
    if follower:
        torch.cuda.synchronize()
        follower.ready()
    for i in range(n):
        if follower:
            follower.before_step()
        if i == warm and mode == "native":  # outside the timed part
            backend["start"] = _backend_counts(adaptalloc.stats())
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step(i)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
        f, t = torch.cuda.mem_get_info()
        peak[0] = max(peak[0], t - f)
        calls.append(device_calls(torch))  # outside the timed part
        if follower:
            follower.after_step()
    if follower:
        follower.finish()
    cpu_steps = benchcpu.cpu_between(cpu0, benchcpu.thread_cpu())
    stop.set()
    th.join()
    t_steps = time.perf_counter() - t_built
    calib_after = benchcpu.calibrate(torch)
    props = torch.cuda.get_device_properties(0)
    res = {"workload": workload, "mode": variant, "steps": n, "warm": warm,
           "peak_mib": (peak[0] - base) / MIB, "context_mib": base / MIB,
           "step_ms": times[warm:], "warm_ms": times[:warm],
           "phase_s": {"init": t_init - t_start, "build": t_built - t_init,
                       "steps": t_steps},
           "cpus": benchcpu.format_cpulist(cpus),
           "gpu_pci": "%04x:%02x:%02x.0" % (getattr(props, "pci_domain_id", 0),
                                          getattr(props, "pci_bus_id", 0),
                                          getattr(props, "pci_device_id", 0)),
           "calib": {"before": calib_before, "after": calib_after},
           "cpu_steps": cpu_steps,
           "step_device_calls": [None if a is None or b is None else [y - x for x, y in zip(a, b)]
                                 for a, b in zip(calls, calls[1:])]}
    if mode == "pluggable":
        res["pool"] = {k: tp.stat(k) for k in ("peak_reserved", "reserved", "in_use")}
    else:
        try:  # the allocator's own figures, beside the driver's
            res["torch"] = {"max_reserved": torch.cuda.max_memory_reserved(),
                            "max_allocated": torch.cuda.max_memory_allocated()}
        except RuntimeError as e:
            res["torch"] = {"error": str(e)}
    if follower:  # the driver's figure counted the other runs too: the allocator's own
        res["peak_mib"] = res.get("torch", {}).get("max_reserved", 0) / MIB
        res["peak_source"] = "max_memory_reserved"
    if mode == "native":
        doc = adaptalloc.stats()
        res["pool"] = _pool_summary(doc)
        if "start" in backend:  # the device pools' backend calls over the measured steps
            end = _backend_counts(doc)
            res["backend_measured"] = {k: end[k] - backend["start"][k] for k in end}
            res["backend_measured"]["step_ms_total"] = sum(res["step_ms"])
    if capture:
        import pickle

        snap = torch.cuda.memory._snapshot()
        entries = snap["device_traces"][torch.cuda.current_device()]
        with open(os.path.join(capture, f"{workload}-{mode}.pickle"), "wb") as f:
            pickle.dump({"device_traces": [entries], "segments": []}, f, protocol=4)
        torch.cuda.memory._record_memory_history(enabled=None)
        with open(os.path.join(capture, f"{workload}-{mode}.json"), "w") as f:
            json.dump({k: res[k] for k in ("workload", "mode", "steps", "peak_mib", "torch")}, f)
    return res


def mode_env(mode, tmp, runtime):
    """The environment of a run under `mode` (PyTorch's setting, adaptalloc's
    runtime: no model, no policy file, so the default policy)."""
    env = dict(os.environ)
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    variant, mode = mode, base_mode(mode)
    if mode in CONF:
        env["PYTORCH_CUDA_ALLOC_CONF"] = CONF[mode]
    for k in ("ADAPTALLOC_MODEL", "ADAPTALLOC_POLICY", "ADAPTALLOC_POLICY_DIR"):
        env.pop(k, None)
    if mode == "native" and runtime == "full":
        # a store of its own per variant: in --lockstep they run at the same time
        env["ADAPTALLOC_DB"] = os.path.join(tmp, "zoo%s.db" % variant[len(mode):].replace("@", "-"))
        env["ADAPTALLOC_HTTP"] = "127.0.0.1:0"
    else:
        env["ADAPTALLOC_DB"] = "off"
        env["ADAPTALLOC_HTTP"] = "off"
    env["ADAPTALLOC_QUIET"] = "1"
    # torch.cuda.is_available()/device_count() through NVML, not cuInit: a
    # server that imports transformers must not initialise CUDA before forking
    env["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    # the repository's torch/ folder must not shadow PyTorch
    env["PYTHONPATH"] = os.pathsep.join(p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                                        if p and os.path.abspath(p) != ROOT)
    env.update(VARIANTS.get(variant, {}))
    return env


# ---------------------------------------------------------------- server

def serve(mode, workloads):
    """A server: imports once, then for each job line `workload steps capture
    result_path log_path timeout_s lockstep_prefix` (tab-separated; "-" for
    none) forks a child that runs it and answers `DONE rc`. Answers `READY`
    after the imports, or `ERROR why`."""
    out = sys.stdout
    try:
        benchcpu.pin_cpus()  # the imports too run where the measured children will
        preload(workloads)
        if base_mode(mode) == "native":
            import adaptalloc.torch as aat

            ok, why = aat.native_available()
            if not ok:
                raise RuntimeError("%s (%s); install the package first: pip install ."
                                   % (NATIVE_MISSING, why))
    except Exception as e:  # noqa: BLE001 - reported to the runner, which goes on
        out.write("ERROR %s: %s\n" % (type(e).__name__, str(e).replace("\n", " ")))
        out.flush()
        return
    out.write("READY\n")
    out.flush()
    for line in sys.stdin:
        w, steps, cap, result_path, log_path, timeout, turns = line.rstrip("\n").split("\t")
        pid = os.fork()
        if pid == 0:
            rc = 1
            try:
                fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                sys.stdout = os.fdopen(1, "w", buffering=1)
                sys.stderr = os.fdopen(2, "w", buffering=1)
                res = child(w, mode, cap if cap != "-" else None, int(steps) or None,
                            turns if turns != "-" else None)
                with open(result_path, "w") as f:
                    json.dump(res, f)
                rc = 0
            except BaseException:  # noqa: BLE001 - the child reports and exits
                import traceback

                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(rc)
        t0 = time.time()
        deadline, ready_by = t0 + float(timeout), t0 + min(INIT_LIMIT_S, float(timeout))
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                rc = os.waitstatus_to_exitcode(status)
                break
            if ready_by and time.time() > ready_by:  # a fork stuck before CUDA came up
                ready_by = None
                if not os.path.exists(log_path):
                    deadline = 0
                else:
                    with open(log_path, errors="replace") as f:
                        if CUDA_READY not in f.read():
                            deadline = 0
            if time.time() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                rc = 124
                break
            time.sleep(0.02)
        out.write("DONE %d\n" % rc)
        out.flush()


class Runner:
    """Runs (workload, mode) jobs: through a per-mode server's forks, or a
    fresh interpreter per run (--no-fork, or after a forked run failed)."""

    def __init__(self, modes, workloads, fork, runtime, timeout):
        self.tmp = tempfile.mkdtemp(prefix="aa-zoo-")
        self.runtime, self.timeout, self.fork = runtime, timeout, fork
        self.servers = {}
        self.n = 0
        if fork:
            for m in modes:  # started together: the imports overlap
                self.servers[m] = subprocess.Popen(
                    [sys.executable, os.path.abspath(__file__), "--server", m,
                     "--workloads", ",".join(workloads)],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                    env=mode_env(m, self.tmp, runtime), cwd=self.tmp)
        self.ready = {}
        self.unavailable = {}  # mode -> why its runs are not made

    def _server(self, mode):
        """The mode's server once it is ready, or None (then spawn)."""
        p = self.servers.get(mode)
        if p is None:
            return None
        if mode not in self.ready:
            line = "x"
            while line and not line.startswith(("READY", "ERROR")):  # skip stray prints
                line = p.stdout.readline()
            line = line.strip()
            self.ready[mode] = line == "READY"
            if line.startswith("ERROR") and NATIVE_MISSING in line:
                self.unavailable[mode] = line[6:]
            if not self.ready[mode]:
                print(f"  {mode}: server: {line or 'exited'}; a new interpreter per run",
                      flush=True)
        return p if self.ready[mode] else None

    def _start(self, p, workload, steps, capture, turns=None):
        """Sends a job to a server; returns (result path, log path)."""
        self.n += 1
        result = os.path.join(self.tmp, f"r{self.n}.json")
        log = os.path.join(self.tmp, f"r{self.n}.log")
        p.stdin.write("\t".join([workload, str(steps or 0), capture or "-", result, log,
                                 str(self.timeout), turns or "-"]) + "\n")
        p.stdin.flush()
        return result, log

    def _forked(self, p, workload, mode, steps, capture):
        result, log = self._start(p, workload, steps, capture)
        return self._finish(p, mode, result, log)

    def _finish(self, p, mode, result, log):
        r, _, _ = select.select([p.stdout], [], [], self.timeout + 30)
        line = p.stdout.readline().strip() if r else ""
        if line == "DONE 0" and os.path.exists(result):
            with open(result) as f:
                return json.load(f), None, False
        with open(log, errors="replace") if os.path.exists(log) else open(os.devnull) as f:
            text = f.read()
        if not line:  # the server is gone or stuck: no more forks for this mode
            self.ready[mode] = False
        # a fork that failed before CUDA was ready is retried in a new interpreter
        return None, f"{line or 'no answer from the server'}: {text[-1500:]}", \
            CUDA_READY not in text

    def _spawned(self, workload, mode, steps, capture):
        cmd = [sys.executable, os.path.abspath(__file__), "--child", workload, mode]
        if steps:
            cmd += ["--steps", f"{workload}={steps}"]
        if capture:
            cmd += ["--capture", capture]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, cwd=self.tmp,
                               env=mode_env(mode, self.tmp, self.runtime), timeout=self.timeout)
        except subprocess.TimeoutExpired:
            return None, f"timed out after {self.timeout} s"
        if r.returncode != 0:
            return None, f"rc={r.returncode}: {r.stderr[-1500:]}"
        lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
        if not lines:
            return None, f"no result line: {r.stderr[-1500:]}"
        return json.loads(lines[-1]), None

    def run(self, workload, mode, steps=None, capture=None, rep=0):
        t0 = time.time()
        if mode in self.unavailable:
            print(f"  {workload}/{mode}: not run ({self.unavailable[mode]})", flush=True)
            return None
        p = self._server(mode)
        if p is None and mode in self.unavailable:
            print(f"  {workload}/{mode}: not run ({self.unavailable[mode]})", flush=True)
            return None
        res, err, retry = None, None, True
        if p is not None:
            res, err, retry = self._forked(p, workload, mode, steps, capture)
            if res is None and retry:
                print(f"  {workload}/{mode}: forked run FAILED before CUDA was ready ({err}); "
                      "again in a new interpreter", flush=True)
        if res is None and retry:
            res, err = self._spawned(workload, mode, steps, capture)
            if res is not None and p is not None:
                self.ready[mode] = False  # the fork failed where a new process worked
        if res is None:
            print(f"  {workload}/{mode}: FAILED {err}", flush=True)
            return None
        return self._report(res, workload, mode, t0, rep)

    def _report(self, res, workload, mode, t0, rep):
        res["process_s"] = time.time() - t0
        res["rep"] = rep
        print("RESULT " + json.dumps(res), flush=True)
        cal = res.get("calib", {})
        cpu = "  cpu %s us/op (before/after)" % "/".join(
            f"{cal[k]['torch_us']:.2f}" if "torch_us" in cal.get(k, {}) else "-"
            for k in ("before", "after"))
        if res.get("cpu_steps"):
            cpu += "  threads' CPU %.2f s main, %.2f s others" % (res["cpu_steps"]["main"],
                                                                res["cpu_steps"]["others"])
        print(f"  {workload:8s} {mode:10s} peak {res['peak_mib']:9.1f} MiB  step "
              f"{statistics.median(res['step_ms'] or res['warm_ms']):8.2f} ms{cpu}  "
              f"({res['process_s']:.1f} s)", flush=True)
        return res

    def run_lockstep(self, workload, modes, steps=None, rep=0):
        """Runs the workload under every mode at once, the steps taking turns
        (lockstep.py); {mode: figures} of the runs that succeeded."""
        t0 = time.time()
        jobs = {}
        for m in modes:
            p = self._server(m)
            if p is None:
                why = self.unavailable.get(m, "no server (lockstep needs the forking servers)")
                print(f"  {workload}/{m}: not run in lockstep ({why})", flush=True)
            else:
                jobs[m] = p
        lead = lockstep.Leader(self.tmp, list(jobs), self.timeout)
        try:
            files = {m: self._start(p, workload, steps, None, lead.prefix[m])
                     for m, p in jobs.items()}

            def alive(m):  # its server has not answered DONE yet
                r, _, _ = select.select([jobs[m].stdout], [], [], 0)
                return not r

            state = lead.run(alive)
            out = {}
            for m, p in jobs.items():
                res, err, _ = self._finish(p, m, *files[m])
                if res is None or state[m] != "finished":
                    print(f"  {workload}/{m}: lockstep run FAILED ({state[m]}; "
                          f"{err or 'it did not finish its steps'})", flush=True)
                    continue
                res["lockstep"] = [x for x in jobs]
                out[m] = self._report(res, workload, m, t0, rep)
            return out
        finally:
            lead.close()

    def close(self):
        for p in self.servers.values():
            try:
                p.stdin.close()
                p.wait(timeout=10)
            except Exception:  # noqa: BLE001 - best effort at exit
                p.kill()


# ---------------------------------------------------------------- report

def med_range(v, nd=0):
    if not v:
        return "-"
    m = statistics.median(v)
    if len(v) == 1:
        return f"{m:.{nd}f}"
    return f"{m:.{nd}f} [{min(v):.{nd}f}, {max(v):.{nd}f}]"


def run_cpu_us(r):
    """A run's process speed: us per small torch CPU op, the mean of its
    calibrations before and after the steps (None for a run without)."""
    v = [c["torch_us"] for c in (r.get("calib") or {}).values() if "torch_us" in c]
    return sum(v) / len(v) if v else None


def run_device_calls(r):
    """A run's device allocations + frees over its measured steps (None for
    a run without the counts)."""
    v = r.get("step_device_calls")
    if not v:
        return None
    v = v[r.get("warm", 0):]
    return None if not v or any(x is None for x in v) else sum(a + b for a, b in v)


def quiet_steps(r):
    """Per measured step: True where the run made no device call (no page
    map, no cudaMalloc) in it; [] without the counts."""
    v = (r.get("step_device_calls") or [])[r.get("warm", 0):]
    return [c is not None and c[0] + c[1] == 0 for c in v]


def by_rep(rs):
    """{repetition: run} (runs of an older JSON without "rep": in order)."""
    return {r.get("rep", i): r for i, r in enumerate(rs)}


def summarise(runs, modes, wls):
    """Per workload: each mode's peaks, median step times and CPU
    calibration over the reps, and adaptalloc's ratios to PyTorch's: of the
    medians, and paired (step k against the default's step k of the same
    repetition)."""
    out = {}
    for w in wls:
        peaks = {m: [r["peak_mib"] for r in runs[w][m]] for m in modes}
        steps = {m: [statistics.median(r["step_ms"] or r["warm_ms"]) for r in runs[w][m]]
                 for m in modes}
        cpu = {m: [c for c in map(run_cpu_us, runs[w][m]) if c is not None] for m in modes}
        calls = {m: [c for c in map(run_device_calls, runs[w][m]) if c is not None]
                 for m in modes}
        med_peak = {m: statistics.median(v) for m, v in peaks.items() if v}
        med_step = {m: statistics.median(v) for m, v in steps.items() if v}
        torch_peaks = {m: v for m, v in med_peak.items() if m in TORCH_MODES}
        best = min(torch_peaks, key=torch_peaks.get) if torch_peaks else None
        ratios = {}
        for m in our_modes(modes):
            if m not in med_peak:
                continue
            ratios[m] = {
                "peak_vs_default": (med_peak[m] / med_peak["default"]
                                    if "default" in med_peak else None),
                "peak_vs_best": med_peak[m] / torch_peaks[best] if best else None,
                "best": best,
                "speed_vs_default": (med_step["default"] / med_step[m]
                                     if "default" in med_step and med_step[m] else None),
                "paired_speed": [], "paired_all": None, "cpu_vs_default": [],
                "paired_quiet": []}
            if "default" not in modes:
                continue
            ours, dflt = by_rep(runs[w][m]), by_rep(runs[w]["default"])
            pooled = []
            for rep in sorted(set(ours) & set(dflt)):
                pr = benchcpu.paired(dflt[rep]["step_ms"], ours[rep]["step_ms"])
                if pr:
                    ratios[m]["paired_speed"].append(statistics.median(pr))
                    pooled += pr
                    quiet = [x for x, c in zip(pr, quiet_steps(ours[rep])) if c]
                    if quiet:
                        ratios[m]["paired_quiet"].append(statistics.median(quiet))
                a, b = run_cpu_us(ours[rep]), run_cpu_us(dflt[rep])
                if a and b:
                    ratios[m]["cpu_vs_default"].append(a / b)
            ratios[m]["paired_all"] = statistics.median(pooled) if pooled else None
        bk = {m: [r["backend_measured"] for r in runs[w][m] if r.get("backend_measured")]
              for m in our_modes(modes)}
        threads = {m: [[r["cpu_steps"]["main"], r["cpu_steps"]["others"]] for r in runs[w][m]
                       if r.get("cpu_steps")] for m in modes}
        out[w] = {"peak_mib": peaks, "step_ms": steps, "cpu_us": cpu, "device_calls": calls,
                  "backend_measured": bk, "thread_cpu_s": threads, "ratios": ratios,
                  "extra": {m: [{k: r.get(k) for k in ("pool", "torch", "phase_s",
                                                       "process_s", "calib", "cpus", "rep",
                                                       "backend_measured", "peak_source")}
                                for r in runs[w][m]] for m in modes}}
    return out


def print_tables(summary, modes):
    def fmt(x, nd=3, suffix=""):
        return f"{x:.{nd}f}{suffix}" if x is not None else "-"

    ours = our_modes(modes)
    print()
    if any(r.get("peak_source") for s in summary.values() for v in s.get("extra", {}).values()
           for r in v):
        print("peak reserved, MiB: the allocators' own max_memory_reserved (lockstep runs "
              "share the device, so the driver's figure would count both); median [min, max] "
              "over the reps")
    else:
        print("peak device memory, MiB (driver: total - free, less the CUDA context); "
              "median [min, max] over the reps")
    cols = list(modes) + [f"{m} / {x}" for m in ours for x in ("default", "best of PyTorch")]
    print("| workload | " + " | ".join(cols) + " |")
    print("|---" * (1 + len(cols)) + "|")
    for w, s in summary.items():
        cells = [med_range(s["peak_mib"][m]) for m in modes]
        for m in ours:
            r = s["ratios"].get(m, {})
            best = f" ({r['best']})" if r.get("best") else ""
            cells += [fmt(r.get("peak_vs_default")), fmt(r.get("peak_vs_best")) + best]
        print(f"| {w} | " + " | ".join(cells) + " |")
    print()
    print("step time, ms (median of each run's steps); median [min, max] over the reps; "
          "speed = default / ours: of the medians, and paired (median of step k's ratios "
          "in each rep; median [min, max] over the reps)")
    cols = list(modes) + [f"{m} speed vs default" for m in ours] + \
        [f"{m} paired speed vs default" for m in ours]
    print("| workload | " + " | ".join(cols) + " |")
    print("|---" * (1 + len(cols)) + "|")
    for w, s in summary.items():
        cells = [med_range(s["step_ms"][m], 2) for m in modes]
        cells += [fmt(s["ratios"].get(m, {}).get("speed_vs_default"), 3, "x") for m in ours]
        for m in ours:
            v = s["ratios"].get(m, {}).get("paired_speed") or []
            cells.append(med_range(v, 3) + "x" if v else "-")
        print(f"| {w} | " + " | ".join(cells) + " |")
    print()
    print("process speed: us per small torch CPU op (each run's mean of its calibrations "
          "before and after the steps; lower is faster); median [min, max] over the reps; "
          "ours / default: median of the same rep's ratios (above 1: ours ran on a slower CPU)")
    print("and the CPU seconds the process's threads used during the steps: main thread / "
          "all others (autograd's, the memory poll, a runtime's own), median over the reps")
    cols = list(modes) + [f"{m} / default" for m in ours] + [f"{m} CPU s main/others"
                                                             for m in modes]
    print("| workload | " + " | ".join(cols) + " |")
    print("|---" * (1 + len(cols)) + "|")
    for w, s in summary.items():
        cells = [med_range(s["cpu_us"][m], 3) for m in modes]
        for m in ours:
            v = s["ratios"].get(m, {}).get("cpu_vs_default") or []
            cells.append(med_range(v, 3) if v else "-")
        for m in modes:
            v = s.get("thread_cpu_s", {}).get(m) or []
            cells.append("%.2f/%.2f" % (statistics.median(x[0] for x in v),
                                        statistics.median(x[1] for x in v)) if v else "-")
        print(f"| {w} | " + " | ".join(cells) + " |")
    if not any(v for s in summary.values() for v in s.get("device_calls", {}).values()):
        return
    print()
    print("device calls over the measured steps (the allocator's own num_device_alloc + "
          "num_device_free: cudaMalloc/cudaFree, adaptalloc's page maps/unmaps and segments); "
          "median [min, max] over the reps")
    print("and adaptalloc's time inside its backend calls over the measured steps (ms; "
          "pages mapped / unmapped; and as a share of the run's summed step time)")
    print("and the paired speed over only the steps in which adaptalloc made no device call "
          "(median over the reps of each rep's median; '-' where every step made one)")
    cols = list(modes) + [f"{m} backend ms (maps/unmaps, share)" for m in ours] + \
        [f"{m} paired speed, steps without device calls" for m in ours]
    print("| workload | " + " | ".join(cols) + " |")
    print("|---" * (1 + len(cols)) + "|")
    for w, s in summary.items():
        cells = [med_range(s.get("device_calls", {}).get(m, [])) for m in modes]
        for m in ours:
            v = s.get("backend_measured", {}).get(m) or []
            if not v:
                cells.append("-")
                continue
            ms = [x["backend_ms"] for x in v]
            share = [x["backend_ms"] / x["step_ms_total"] for x in v if x.get("step_ms_total")]
            cells.append(med_range(ms, 1) + " (%s/%s%s)" % (
                med_range([x["pages_mapped"] for x in v]),
                med_range([x["pages_unmapped"] for x in v]),
                ", " + med_range([100 * x for x in share], 1) + "%" if share else ""))
        for m in ours:
            v = s["ratios"].get(m, {}).get("paired_quiet") or []
            cells.append(med_range(v, 3) + "x" if v else "-")
        print(f"| {w} | " + " | ".join(cells) + " |")


# ---------------------------------------------------------------- main

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
    """`kvgen=8,cnn=20` -> {"kvgen": 8, "cnn": 20}; exits naming a bad item."""
    out = {}
    for item in filter(None, (text or "").split(",")):
        w, eq, n = item.partition("=")
        if not eq or w not in BUILD or not n.isdigit() or int(n) < 1:
            sys.exit(f"bench_zoo: --steps: {item!r} is not WORKLOAD=N with N >= 1 "
                     f"(workloads: {', '.join(BUILD)})")
        out[w] = int(n)
    return out


def names(text, known, what):
    got = [x for x in (text or "").split(",") if x]
    if not got:
        sys.exit(f"bench_zoo: --{what} is empty (one or more of {', '.join(known)})")
    for x in got:
        if x not in known:
            sys.exit(f"bench_zoo: unknown {what[:-1]} {x!r} (one of {', '.join(known)})")
    return got


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=2, help="repetitions of every run (default 2)")
    ap.add_argument("--workloads", default=",".join(WORKLOADS),
                    help="comma-separated, of " + ",".join(WORKLOADS) +
                         " (and smoke: a few allocations, to check the harness)")
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
    ap.add_argument("--dry-run", action="store_true",
                    help="print the CPU set and the order of the runs, start nothing")
    ap.add_argument("--report", default=None, metavar="JSON",
                    help="print the tables of an earlier run's --out file, run nothing")
    ap.add_argument("--child", nargs=2, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--server", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.reps < 1:
        sys.exit("bench_zoo: --reps must be at least 1")
    wls = names(args.workloads, list(BUILD), "workloads")
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
    modes = names(args.modes, MODES + list(VARIANTS), "modes")
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
    if args.dry_run:
        for rep, w, m in plan(1 if args.capture else args.reps, wls,
                              names(args.capture_modes, list(TORCH_MODES), "capture-modes")
                              if args.capture else modes):
            if args.lockstep and m != modes[(rep + wls.index(w)) % len(modes)]:
                continue
            what = "all at once, taking turns" if args.lockstep else m
            print(f"  rep {rep + 1} {w} {what}" + (f" steps {steps[w]}" if w in steps else ""))
        return
    t_start = time.time()
    if args.capture:
        cmodes = names(args.capture_modes, list(TORCH_MODES), "capture-modes")
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
    try:
        if args.lockstep and args.no_fork:
            sys.exit("bench_zoo: --lockstep needs the forking servers (not --no-fork)")
        for rep, w, m in plan(args.reps, wls, modes):
            k = (rep + wls.index(w)) % len(modes)
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
    print_tables(summary, modes)
    print(f"\n{time.time() - t_start:.0f} s; skipped: {', '.join(skipped) or 'none'}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"reps": args.reps, "modes": modes, "skipped": skipped,
                       "summary": summary, "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
