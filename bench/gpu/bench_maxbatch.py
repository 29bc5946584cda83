#!/usr/bin/env python3
"""The largest batch (and sequence length) that fits under one memory cap,
for adaptalloc and PyTorch's allocator settings (issue 24, item 3).

    python3 bench/gpu/bench_maxbatch.py [--workloads bert,gpt2,gpt2seq,cnn]
                                        [--modes native,default,expandable]
                                        [--budget-s 420] [--out maxbatch3.json]
    python3 bench/gpu/bench_maxbatch.py --report maxbatch3.json   # the table again

Workloads (random weights, fixed seeds; each searches one axis):
  bert     BERT-base inference (transformers BertModel, fp16, eval,
           inference_mode), sequence 128; batch searched in steps of 32
           under a 2 GiB cap
  gpt2     GPT-2-small training (GPT2LMHeadModel(GPT2Config()), AdamW, bf16
           autocast), sequence 512; batch searched in steps of 1 under 6 GiB
  gpt2seq  the same training with GPT2Config(n_positions=4096) at batch 2
           (--seq-batch); sequence length searched in steps of 32, up to
           4096, under 6 GiB
  cnn      CNN training: the zoo's ResNet-style conv net (zoo_workloads.
           cnn_net), fp32, SGD with momentum, 224x224 images; batch searched
           in steps of 4 under 4 GiB
  smoke    (not in the default list) two plain tensors of N and N/2 MiB a
           step under 0.25 GiB: the harness's check, seconds on a GPU
--cap-gib W=G,... and --step W=N,... change a workload's cap and step.

Allocators (--modes): native (adaptalloc.torch.install(), which must return
"native": the installed package's native allocator, default policy, store
and HTTP server off), default (PyTorch's caching allocator as shipped),
expandable (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True); the
environment of each is zoo_modes.mode_env's.

The cap, the same for every allocator: torch.cuda.set_per_process_memory_
fraction(cap / total), total from torch.cuda.mem_get_info, set right after
CUDA initialisation and before the model is built (the weights count). The
native allocator honours it: its setMemoryFraction (torch/native/
allocator.cpp) sets the device pool's limit to fraction x total bytes, the
figure PyTorch's allocator uses, and both check it against the bytes they
reserve from the device (segments and mapped pages; PyTorch's
total_allocated_memory, adaptalloc's bytes_reserved). Neither counts memory
outside the allocator (the CUDA context, the libraries' own memory), which
is reported apart as "non-allocator memory". A native run records the device
pool's limit_bytes from adaptalloc.stats() to show the cap arrived.

Search, in one process per (workload, allocator): sizes are multiples of
the step; starting from --start (a size that fits), the size doubles until
a probe fails (or reaches the workload's maximum), then a binary search
between the largest size that ran and the smallest that failed. Each probe
runs 2 full steps (--probe-steps; training: forward, backward, optimizer
step) in the same process as the probes before it, so the allocator's
caching between steps counts as in real training; before each probe the
gradients are dropped, gc.collect() and torch.cuda.empty_cache() run and
the peak statistics are reset, so a probe starts from the model (and the
optimizer's state) alone whatever the probes before it did. A probe fails on
torch.OutOfMemoryError (caught; the process goes on); any other error ends
that search (its result says so). Binary search assumes that what fits at
size n fits at every smaller size. --probe-process runs every probe in a
process of its own instead (slower: each one builds the model again).

Figures per probe: peak allocated (torch.cuda.max_memory_allocated, the
floor no allocator can go under) and peak reserved over the probe, and after
a probe that ran, the non-allocator memory: device memory in use by the
driver's figure (total - free, torch.cuda.mem_get_info) minus
torch.cuda.memory_reserved(). For a failed probe the peak is up to the
failure only.

"At the limit": after a workload's searches, one more process under PyTorch's
default allocator, without a cap, runs each allocator's largest size and the
next size up (2 steps each) and records their peak allocated. An allocator's
largest size is at the limit when the next size's peak allocated, without a
cap, is above the cap: no allocator could have run it, since every byte it
allocates is reserved under the cap. (The non-allocator memory is not
subtracted: set_per_process_memory_fraction does not count it, for either
allocator; the report prints it, and the JSON has "at_limit_minus_non_
allocator", the same test against cap minus the largest non-allocator
memory measured, for a cap meant as the whole device's.) Beside it, from
the allocator's own capped probes, the next size's peak extrapolated along
the line through the two largest sizes that ran ("extrapolated"): the
uncapped run's libraries may choose differently with the whole device free
(cuDNN's heuristics take algorithms whose workspace the allocator can give,
so the CNN's uncapped figure can hold a larger workspace than any capped
run); where the two figures disagree on "at the limit", the table shows both
and the per-allocator lines say which is which.

Budget: --budget-s S (default 420) stops starting processes whose expected
time (the longest one so far) would end after S seconds, and every search
stops probing at S seconds; a search stopped early reports its largest size
so far as a lower bound ("partial"). Figures are printed as they come
(PROBE lines, a RESULT line per process), then the table.
"""
import argparse
import gc
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from zoo_modes import mode_env, names  # noqa: E402 - bench/gpu/zoo_modes.py

GIB = 1 << 30
MIB = 1 << 20
MODES = ["native", "default", "expandable"]
LABEL = {"native": "adaptalloc", "default": "default", "expandable": "expandable"}
FLOOR_MODE = "default"  # the allocator of the uncapped "at the limit" runs
FLOOR = "floor"  # the mode name of those runs in the JSON

# name -> what it is, the axis searched, the fixed dimension, cap, start, step, maximum
WORKLOADS = {
    "bert": {"what": "BERT-base inference fp16", "axis": "batch", "fixed": "sequence 128",
             "cap_gib": 2.0, "start": 128, "step": 32, "max": 16384},
    "gpt2": {"what": "GPT-2-small training", "axis": "batch", "fixed": "sequence 512",
             "cap_gib": 6.0, "start": 1, "step": 1, "max": 512},
    "gpt2seq": {"what": "GPT-2-small training", "axis": "sequence", "fixed": "batch {seq_batch}",
                "cap_gib": 6.0, "start": 128, "step": 32, "max": 4096},
    "cnn": {"what": "CNN training (ResNet-style)", "axis": "batch", "fixed": "224x224",
            "cap_gib": 4.0, "start": 16, "step": 4, "max": 8192},
    # the harness's check, not in the default list: two tensors of `size` and
    # size/2 MiB a step, so the largest size is about cap / 1.5 MiB
    "smoke": {"what": "smoke (the harness's check)", "axis": "MiB", "fixed": "two tensors",
              "cap_gib": 0.25, "start": 16, "step": 8, "max": 4096},
}
DEFAULT_WORKLOADS = ["bert", "gpt2", "gpt2seq", "cnn"]
GPT2SEQ_POSITIONS = 4096  # GPT2Config(n_positions=...) of gpt2seq
START_FLOOR_S = 15.0  # no process starts with less of the budget left


# ---------------------------------------------------------------- the search


def search(probe, start, step, top):
    """The largest multiple of `step` up to `top` for which probe(size) is
    True: doubling from `start` (rounded up to a multiple of step) until a
    probe fails or `top` is reached, then binary search. probe returns True
    (fits), False (out of memory) or None (stop: an error or the budget).
    Returns {"best", "fail" (the smallest size that failed, None if none),
    "complete" (the search ended by itself), "at_max" (best is `top`),
    "stopped" (probe returned None)}."""
    if step < 1 or top < step:
        raise ValueError(f"step {step} and maximum {top}: need 1 <= step <= maximum")
    kmax = top // step
    k = min(max(1, -(-start // step)), kmax)
    lo, hi = 0, None  # lo: the largest k that ran; hi: the smallest k that failed
    stopped = False
    while True:
        r = probe(k * step)
        if r is None:
            stopped = True
            break
        if not r:
            hi = k
            break
        lo = k
        if k >= kmax:
            break
        k = min(2 * k, kmax)
    while not stopped and hi is not None and hi - lo > 1:
        mid = (lo + hi) // 2
        r = probe(mid * step)
        if r is None:
            stopped = True
        elif r:
            lo = mid
        else:
            hi = mid
    return {"best": lo * step, "fail": None if hi is None else hi * step,
            "complete": not stopped, "at_max": lo == kmax, "stopped": stopped}


# ---------------------------------------------------------------- workloads


def model_info(model):
    """Parameters, and the bytes of the model's buffers (GPT-2's causal-mask
    buffer, where the installed transformers has one, grows with n_positions)."""
    return {"params": sum(p.numel() for p in model.parameters()),
            "buffer_bytes": sum(b.numel() * b.element_size() for b in model.buffers())}


def wl_bert(torch, dev, seq_batch):
    """BERT-base inference, fp16, sequence 128; `size` is the batch."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    model = BertModel(BertConfig()).half().to(dev).eval()  # fp16 on the CPU, then moved

    def step(b):
        with torch.inference_mode():
            ids = torch.randint(0, 30522, (b, 128), device=dev)
            y = model(input_ids=ids).last_hidden_state
            del y, ids

    return step, lambda: None, model_info(model)


def _gpt2(torch, dev, positions, shape):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config() if positions is None else GPT2Config(n_positions=positions)
    model = GPT2LMHeadModel(cfg).to(dev).train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)

    def step(size):
        b, n = shape(size)
        ids = torch.randint(0, cfg.vocab_size, (b, n), device=dev)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        del loss, ids

    def reset():
        opt.zero_grad(set_to_none=True)

    info = model_info(model)
    info.update(n_positions=cfg.n_positions,
                attn_implementation=getattr(model.config, "_attn_implementation", None))
    return step, reset, info


def wl_gpt2(torch, dev, seq_batch):
    """GPT-2-small training, sequence 512; `size` is the batch."""
    return _gpt2(torch, dev, None, lambda b: (b, 512))


def wl_gpt2seq(torch, dev, seq_batch):
    """GPT-2-small training at batch seq_batch; `size` is the sequence length."""
    return _gpt2(torch, dev, GPT2SEQ_POSITIONS, lambda n: (seq_batch, n))


def wl_cnn(torch, dev, seq_batch):
    """The zoo's CNN trained on 224x224 images; `size` is the batch."""
    import torch.nn as nn
    from zoo_workloads import cnn_net

    torch.manual_seed(0)
    model = cnn_net(torch).to(dev).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    lossf = nn.CrossEntropyLoss()

    def step(b):
        x = torch.randn(b, 3, 224, 224, device=dev)
        y = torch.randint(0, 1000, (b,), device=dev)
        opt.zero_grad(set_to_none=True)
        loss = lossf(model(x), y)
        loss.backward()
        opt.step()
        del loss, x, y

    def reset():
        opt.zero_grad(set_to_none=True)

    return step, reset, model_info(model)


def wl_smoke(torch, dev, seq_batch):
    """Two plain tensors a step (size and size/2 MiB): the harness's check."""

    def step(size):
        x = torch.empty(size * MIB, dtype=torch.uint8, device=dev)
        y = torch.empty(size * MIB // 2, dtype=torch.uint8, device=dev)
        del x, y

    return step, lambda: None, {"params": 0, "buffer_bytes": 0}


BUILD = {"bert": wl_bert, "gpt2": wl_gpt2, "gpt2seq": wl_gpt2seq, "cnn": wl_cnn,
         "smoke": wl_smoke}


# ---------------------------------------------------------------- one process


def emit(kind, doc):
    print(kind + " " + json.dumps(doc), flush=True)


def child(a):
    """One process: one allocator, the cap, the model, then the search (or
    the probes of --sizes). Prints a PROBE line per probe and a RESULT line."""
    t_start = time.time()
    import torch

    res = {"workload": a.workload, "mode": a.mode, "cap": a.cap}
    if a.mode == "native":
        import adaptalloc
        import adaptalloc.torch as aat

        got = aat.install()
        if got != "native":
            raise RuntimeError(f"adaptalloc.torch.install() gave {got!r}, not the native "
                               "allocator")
    torch.cuda.init()
    dev = torch.device("cuda")
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    res.update(total=total, context=total - free, torch=torch.__version__,
               device_name=torch.cuda.get_device_name(0),
               alloc_conf=os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""))
    if a.cap:
        torch.cuda.set_per_process_memory_fraction(a.cap / total)
        res["fraction"] = a.cap / total
        res["cap_how"] = "torch.cuda.set_per_process_memory_fraction"
        if a.mode == "native":  # the device pool's limit: the cap arrived
            try:
                res["pool_limit"] = [p.get("limit_bytes")
                                     for p in adaptalloc.stats().get("pools", [])
                                     if p.get("backend") == "cuda"
                                     or str(p.get("name", "")).startswith("device")]
            except Exception as e:  # noqa: BLE001 - a figure, not the measurement
                res["pool_limit"] = f"{type(e).__name__}: {e}"
    oom_type = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
    step, reset, info = BUILD[a.workload](torch, dev, a.seq_batch)
    torch.cuda.synchronize()
    res["info"] = info
    res["after_build"] = {"allocated": torch.cuda.memory_allocated(),
                          "reserved": torch.cuda.memory_reserved()}
    probes = []

    def probe(size):
        if a.deadline and time.time() > a.deadline:
            emit("PROBE", {"size": size, "ok": None, "error": "budget: not run"})
            return None
        rec = {"size": size}
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        ok, err = None, None
        try:
            for _ in range(a.probe_steps):
                step(size)
            torch.cuda.synchronize()
            ok = True
        except oom_type as e:
            ok, err = False, str(e).strip().splitlines()[0][:400] if str(e).strip() else "OOM"
        except Exception as e:  # noqa: BLE001 - not an OOM: this search ends here
            ok, err = None, (type(e).__name__ + ": " + str(e).strip())[:400]
        rec.update(ok=ok, s=round(time.perf_counter() - t0, 3))
        if err:
            rec["error"] = err
        try:
            rec["peak_allocated"] = torch.cuda.max_memory_allocated()
            rec["peak_reserved"] = torch.cuda.max_memory_reserved()
            if ok:
                f, t = torch.cuda.mem_get_info()
                rec["device_used"] = t - f
                rec["reserved"] = torch.cuda.memory_reserved()
                rec["non_allocator"] = rec["device_used"] - rec["reserved"]
            reset()
            gc.collect()
            torch.cuda.empty_cache()
        except Exception as e:  # noqa: BLE001 - a broken context: stop
            rec.setdefault("error", (type(e).__name__ + ": " + str(e).strip())[:400])
            ok = rec["ok"] = None
        probes.append(rec)
        emit("PROBE", rec)
        return ok

    if a.sizes:
        for s in a.sizes:
            if probe(s) is None and a.deadline and time.time() > a.deadline:
                break
        res["result"] = None
    else:
        res["result"] = search(probe, a.start, a.search_step, a.max)
    res["probes"] = probes
    res["process_s"] = round(time.time() - t_start, 2)
    emit("RESULT", res)


# ---------------------------------------------------------------- the harness


class Harness:
    """Starts the processes (one per search, or per probe) within the budget."""

    def __init__(self, args):
        self.a = args
        self.t0 = time.time()
        self.deadline = self.t0 + args.budget_s if args.budget_s else 0
        self.longest = 0.0
        self.tmp = tempfile.mkdtemp(prefix="aa-maxbatch-")
        self.skipped = []

    def close(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def left(self):
        return self.deadline - time.time() if self.deadline else None

    def spawn(self, workload, mode, cap, extra, label):
        """Runs one child; returns (RESULT dict or None, PROBE dicts, rc, stderr
        tail), or None when the budget leaves no room for it."""
        left = self.left()
        if left is not None and left < max(self.longest, START_FLOOR_S):
            self.skipped.append(label)
            print(f"  {label}: skipped (budget {self.a.budget_s:.0f} s, "
                  f"{time.time() - self.t0:.0f} s elapsed)", flush=True)
            return None
        env = mode_env(FLOOR_MODE if mode == FLOOR else mode, self.tmp, "loop")
        cmd = [sys.executable, os.path.abspath(__file__), "--child", workload,
               "--mode", FLOOR_MODE if mode == FLOOR else mode, "--cap", str(cap),
               "--probe-steps", str(self.a.probe_steps), "--seq-batch", str(self.a.seq_batch),
               "--deadline", str(self.deadline)] + extra
        timeout = self.a.timeout_s
        if left is not None:
            timeout = max(10.0, min(timeout, left + 30))
        t = time.time()
        result, probes = None, []
        with tempfile.TemporaryFile("w+") as errf:
            p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=errf, text=True, env=env,
                                 cwd=self.tmp)
            killer = threading.Timer(timeout, p.kill)  # past its time: killed, lines kept
            killer.start()
            try:
                for line in p.stdout:  # as they come: a log cut short still has them
                    kind, _, rest = line.rstrip("\n").partition(" ")
                    try:
                        doc = json.loads(rest) if kind in ("PROBE", "RESULT") else None
                    except ValueError:
                        continue
                    if kind == "PROBE":
                        probes.append(doc)
                        print_probe(label, doc)
                    elif kind == "RESULT":
                        result = doc
                rc = p.wait()
            finally:
                killer.cancel()
                if p.poll() is None:
                    p.kill()
                    p.wait()
            if rc < 0 and time.time() - t >= timeout:
                rc = 124
            errf.seek(0)
            err = errf.read()
        took = time.time() - t
        self.longest = max(self.longest, took)
        if rc != 0 or result is None:
            print(f"  {label}: rc={rc} after {took:.0f} s; stderr: {err.strip()[-800:]}",
                  flush=True)
        return result, probes, rc, err.strip()[-1500:], took

    def search(self, workload, mode, cap, spec):
        """One allocator's search: in one process, or (--probe-process) one
        process per probe driven from here."""
        label = f"{workload}/{mode}"
        if not self.a.probe_process:
            got = self.spawn(workload, mode, cap, ["--start", str(spec["start"]), "--search-step",
                                                   str(spec["step"]), "--max", str(spec["max"])],
                             label)
            if got is None:
                return None
            result, probes, rc, err, took = got
            if result is None:  # killed or crashed: what its probes said
                result = {"result": from_probes(probes, spec), "probes": probes}
            result.update(rc=rc, stderr_tail=err if rc else "", process_s=round(took, 1))
            return result
        probes, first = [], {}

        def probe(size):
            got = self.spawn(workload, mode, cap, ["--sizes", str(size)], f"{label}@{size}")
            if got is None:
                return None
            result, ps, rc, err, _ = got
            if result and not first:
                first.update({k: v for k, v in result.items() if k not in ("probes", "result")})
            probes.extend(ps)
            if not ps:
                return None
            return ps[-1].get("ok")

        res = search(probe, spec["start"], spec["step"], spec["max"])
        out = dict(first)
        out.update(workload=workload, mode=mode, cap=cap, result=res, probes=probes,
                   per_probe_process=True)
        return out


def print_probe(label, r):
    what = "ok" if r.get("ok") else "OOM" if r.get("ok") is False else "error/not run"
    print(f"    {label} {r.get('size')}: {what}"
          + (f", peak allocated {r['peak_allocated'] / MIB:.0f} MiB"
             if "peak_allocated" in r else "")
          + (f", reserved {r['peak_reserved'] / MIB:.0f} MiB" if "peak_reserved" in r else "")
          + (f" ({r['error'][:160]})" if r.get("ok") is None and r.get("error") else ""),
          flush=True)


def from_probes(probes, spec):
    """A search's figures from its PROBE lines alone (its process died): the
    largest size that ran is a lower bound."""
    oks = [p["size"] for p in probes if p.get("ok")]
    fails = [p["size"] for p in probes if p.get("ok") is False]
    best = max(oks) if oks else 0
    above = [s for s in fails if s > best]
    return {"best": best, "fail": min(above) if above else None, "complete": False,
            "at_max": best >= spec["max"] // spec["step"] * spec["step"], "stopped": True}


def floor_sizes(runs, step, top):
    """The sizes of the uncapped run: each allocator's largest and the next."""
    sizes = set()
    for r in runs.values():
        res = (r or {}).get("result") or {}
        best = res.get("best") or 0
        if best:
            sizes.add(best)
        if best + step <= top:
            sizes.add(best + step)
    return sorted(sizes)


def summarise(doc):
    """Per workload: each allocator's largest size, its peaks, the
    non-allocator memory, and whether it is at the limit."""
    rows = []
    for w, wd in doc["workloads"].items():
        cap, step = wd["cap"], wd["step"]
        floor = {}
        for p in (wd["runs"].get(FLOOR) or {}).get("probes", []):
            if p.get("ok"):
                floor[p["size"]] = p["peak_allocated"]
        non_alloc = [p["non_allocator"] for r in wd["runs"].values()
                     for p in (r or {}).get("probes", []) if "non_allocator" in p]
        worst_na = max(non_alloc) if non_alloc else None
        row = {"workload": w, "what": wd["what"], "axis": wd["axis"], "fixed": wd["fixed"],
               "cap": cap, "step": step, "modes": {}}
        for m, r in wd["runs"].items():
            if m == FLOOR or not r:
                continue
            res = r.get("result") or {}
            best = res.get("best")
            probes = r.get("probes", [])
            at = {p["size"]: p for p in probes}
            nxt = best + step if best is not None else None
            d = {"best": best, "complete": bool(res.get("complete")), "at_max": res.get("at_max"),
                 "peak_allocated": at.get(best, {}).get("peak_allocated"),
                 "peak_reserved": at.get(best, {}).get("peak_reserved"),
                 "next": nxt,
                 "next_peak_allocated_at_oom": at.get(nxt, {}).get("peak_allocated")
                 if at.get(nxt, {}).get("ok") is False else None,
                 "non_allocator": max([p["non_allocator"] for p in probes if "non_allocator" in p],
                                      default=None),
                 "uncapped_peak_allocated": floor.get(best),
                 "next_uncapped_peak_allocated": floor.get(nxt),
                 "reserved_over_cap": any(p.get("peak_reserved", 0) > cap for p in probes
                                          if p.get("ok")),
                 "rc": r.get("rc", 0)}
            # the next size's peak from this allocator's own capped probes: the
            # line through the two largest sizes that ran (peaks grow about
            # linearly with batch and, with fused attention, sequence length)
            oks = sorted((p["size"], p["peak_allocated"]) for p in probes
                         if p.get("ok") and "peak_allocated" in p)
            if best and len(oks) >= 2 and oks[-1][0] == best:
                (s1, p1), (s2, p2) = oks[-2], oks[-1]
                est = p2 + (p2 - p1) * step / (s2 - s1)
                d["next_extrapolated_peak_allocated"] = int(est)
                d["at_limit_extrapolated"] = None if res.get("at_max") else est > cap
            else:
                d["next_extrapolated_peak_allocated"] = d["at_limit_extrapolated"] = None
            if res.get("at_max"):
                d["at_limit"] = None  # the search's maximum, not the cap, stopped it
            elif floor.get(nxt) is not None:
                d["at_limit"] = floor[nxt] > cap
                if worst_na is not None:
                    d["at_limit_minus_non_allocator"] = floor[nxt] > cap - worst_na
            else:
                d["at_limit"] = None
            row["modes"][m] = d
        rows.append(row)
    return rows


def fmt_size(d):
    if not d or d.get("best") is None:
        return "-"
    s = str(d["best"])
    if d.get("at_max"):
        s = ">= " + s
    if not d.get("complete"):
        s += " (partial)"
    return s


def limit_text(d):
    """The table's "at the limit?" for one allocator's figures."""
    if d.get("at_max"):
        return "search maximum reached"
    est = d.get("next_extrapolated_peak_allocated")
    how = f"{est / MIB:.0f} MiB extrapolated" if est is not None else ""
    if d.get("at_limit") is None:
        if d.get("at_limit_extrapolated") is None:
            return "-"
        return f"{'yes' if d['at_limit_extrapolated'] else 'no'} ({d['next']}: {how})"
    unc = f"{d['next']} allocates {d['next_uncapped_peak_allocated'] / MIB:.0f} MiB uncapped"
    return f"{'yes' if d['at_limit'] else 'no'} ({unc}" + (f", {how})" if how else ")")


def print_report(rows, modes):
    """The markdown table and the figures behind "at the limit"."""
    ours = "native"
    print("\n| workload | axis | cap | adaptalloc | default | expandable | "
          "adaptalloc / expandable | at the limit? |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        ms = r["modes"]
        o, e = ms.get(ours), ms.get("expandable")
        ratio = "-"
        if o and e and o.get("best") and e.get("best"):
            ratio = f"{o['best'] / e['best']:.3f}"
        lim = limit_text(o) if o else "-"
        print(f"| {r['what']} ({r['fixed']}) | {r['axis']} | {r['cap'] / GIB:g} GiB | "
              f"{fmt_size(ms.get(ours))} | {fmt_size(ms.get('default'))} | "
              f"{fmt_size(ms.get('expandable'))} | {ratio} | {lim} |")
    print("\nPer allocator (MiB): largest size; its peak allocated and reserved under the cap; "
          "the next size's peak allocated without a cap (PyTorch's default, 2 steps), "
          "extrapolated from the two largest sizes that ran under the cap, and as far as it "
          "got before its OOM; at the limit = the uncapped figure is above the cap; "
          "non-allocator memory = driver's in use - memory_reserved()")
    for r in rows:
        for m in modes:
            d = r["modes"].get(m)
            if not d:
                continue

            def mib(x):
                return "-" if x is None else f"{x / MIB:.0f}"

            print(f"  {r['workload']:8} {LABEL.get(m, m):10} {fmt_size(d):>16}  "
                  f"peak allocated {mib(d['peak_allocated'])} reserved {mib(d['peak_reserved'])} "
                  f"| next {d['next']}: uncapped {mib(d['next_uncapped_peak_allocated'])}, "
                  f"extrapolated {mib(d['next_extrapolated_peak_allocated'])}, "
                  f"at its OOM {mib(d['next_peak_allocated_at_oom'])} | non-allocator "
                  f"{mib(d['non_allocator'])} | at the limit {d['at_limit']}"
                  + (" | RESERVED ABOVE THE CAP" if d["reserved_over_cap"] else "")
                  + (f" | rc {d['rc']}" if d["rc"] else ""))


def parse_kv(text, what, conv):
    """`bert=2,gpt2=6` -> {"bert": 2.0, ...}; exits naming a bad item."""
    out = {}
    for item in filter(None, (text or "").split(",")):
        k, eq, v = item.partition("=")
        try:
            val = conv(v)
        except ValueError:
            val = None
        if not eq or k not in WORKLOADS or val is None or val <= 0:
            sys.exit(f"bench_maxbatch: --{what}: {item!r} is not WORKLOAD=N with N > 0 "
                     f"(workloads: {', '.join(WORKLOADS)})")
        out[k] = val
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", default=",".join(DEFAULT_WORKLOADS),
                    help="comma-separated, of " + ",".join(WORKLOADS) +
                         " (default " + ",".join(DEFAULT_WORKLOADS) + ")")
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated, of " +
                    ",".join(MODES))
    ap.add_argument("--cap-gib", default="", help="WORKLOAD=GiB,...: a workload's cap")
    ap.add_argument("--step", default="", help="WORKLOAD=N,...: a workload's search step")
    ap.add_argument("--seq-batch", type=int, default=2, help="gpt2seq's batch (default 2)")
    ap.add_argument("--probe-steps", type=int, default=2, help="full steps per probe (default 2)")
    ap.add_argument("--budget-s", type=float, default=420,
                    help="start nothing that would end after this many seconds (0: no limit)")
    ap.add_argument("--timeout-s", type=float, default=300, help="limit of one process")
    ap.add_argument("--probe-process", action="store_true",
                    help="one process per probe instead of one per search")
    ap.add_argument("--no-limit-check", action="store_true",
                    help="skip the uncapped runs behind 'at the limit?'")
    ap.add_argument("--out", default=None, help="write every figure as JSON here")
    ap.add_argument("--report", default=None, metavar="JSON",
                    help="print the table of an earlier run's --out file, run nothing")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--mode", default="default", help=argparse.SUPPRESS)
    ap.add_argument("--cap", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--start", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--search-step", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--max", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--sizes", type=lambda t: [int(x) for x in t.split(",") if x], default=None,
                    help=argparse.SUPPRESS)
    ap.add_argument("--deadline", type=float, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        a.workload = a.child
        child(a)
        return 0
    if a.report:
        with open(a.report) as f:
            doc = json.load(f)
        print_report(summarise(doc), doc["modes"])
        return 0
    if a.seq_batch < 1 or a.probe_steps < 1:
        sys.exit("bench_maxbatch: --seq-batch and --probe-steps must be at least 1")
    wls = names("bench_maxbatch", a.workloads, list(WORKLOADS), "workloads")
    modes = names("bench_maxbatch", a.modes, MODES, "modes")
    caps = parse_kv(a.cap_gib, "cap-gib", float)
    steps = parse_kv(a.step, "step", int)
    for w, n in steps.items():
        if n > WORKLOADS[w]["max"]:
            sys.exit(f"bench_maxbatch: --step {w}={n} is above its maximum "
                     f"{WORKLOADS[w]['max']}")
    h = Harness(a)
    # stopped from outside (the stage's time limit): the table and the JSON of
    # what was measured still come out (the finally below)
    old_term = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    doc = {"modes": modes, "budget_s": a.budget_s, "probe_steps": a.probe_steps,
           "per_probe_process": a.probe_process, "workloads": {}}
    try:
        for w in wls:
            spec = dict(WORKLOADS[w])
            spec["fixed"] = spec["fixed"].format(seq_batch=a.seq_batch)
            spec["cap"] = int(caps.get(w, spec["cap_gib"]) * GIB)
            spec["step"] = steps.get(w, spec["step"])
            spec["start"] = max(spec["start"], spec["step"])
            print(f"{w}: {spec['what']}, {spec['fixed']}, {spec['axis']} searched in steps of "
                  f"{spec['step']} from {spec['start']} under {spec['cap'] / GIB:g} GiB",
                  flush=True)
            wd = {k: spec[k] for k in ("what", "axis", "fixed", "cap", "step", "start", "max")}
            wd["runs"] = {}
            doc["workloads"][w] = wd
            for m in modes:
                r = h.search(w, m, spec["cap"], spec)
                wd["runs"][m] = r
                if r:
                    res = r.get("result") or {}
                    print(f"  {w}/{m}: largest {spec['axis']} {res.get('best')} (first failure "
                          f"{res.get('fail')}, complete {res.get('complete')}) in "
                          f"{r.get('process_s', 0):.0f} s", flush=True)
                    if "pool_limit" in r:  # the fraction, as the native allocator took it
                        print(f"  {w}/{m}: cap by set_per_process_memory_fraction; the device "
                              f"pool's limit_bytes {r['pool_limit']} (cap {spec['cap']})",
                              flush=True)
            if not a.no_limit_check:
                sizes = floor_sizes(wd["runs"], spec["step"], spec["max"])
                if sizes:
                    got = h.spawn(w, FLOOR, 0, ["--sizes", ",".join(map(str, sizes))],
                                  f"{w}/uncapped")
                    if got is not None:
                        result, probes, rc, err, took = got
                        wd["runs"][FLOOR] = {"probes": probes, "rc": rc,
                                             "stderr_tail": err if rc else "",
                                             "process_s": round(took, 1)}
    finally:
        signal.signal(signal.SIGTERM, old_term)
        h.close()
        doc["skipped"] = h.skipped
        doc["elapsed_s"] = round(time.time() - h.t0, 1)
        rows = summarise(doc)
        doc["summary"] = rows
        print_report(rows, modes)
        print(f"\n{doc['elapsed_s']:.0f} s; skipped: {', '.join(h.skipped) or 'none'}")
        if a.out:
            with open(a.out, "w") as f:
                json.dump(doc, f, indent=1)
    failed = [f"{w}/{m} (rc {r.get('rc')})" for w, wd in doc["workloads"].items()
              for m, r in wd["runs"].items() if r and r.get("rc")]
    if failed:
        print("bench_maxbatch: FAILED: " + ", ".join(failed), flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
