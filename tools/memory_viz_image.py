#!/usr/bin/env python3
"""Render PyTorch's memory_viz "Active Memory Timeline" of a training loop
on adaptalloc's native allocator, for docs/img/.

    python3 tools/memory_viz_image.py [--out-dir DIR] [--steps N]

On a machine with CUDA, torch and adaptalloc._torch_native (pip install .):
installs the native allocator, records history
(torch.cuda.memory._record_memory_history(stacks="python")) over a small
transformer training loop whose sequence length changes every step, and
writes DIR/memory_viz_timeline.pickle (the _dump_snapshot) and
DIR/memory_viz_timeline.html (torch.cuda._memory_viz.trace_plot).

    python3 tools/memory_viz_image.py --png DIR/memory_viz_timeline.html

Anywhere with chromium: screenshots that HTML into memory_viz_timeline.png
beside it (headless; the page loads MemoryViz.js and d3 from their CDNs,
cdn.jsdelivr.net and cdn.skypack.dev, so it needs the network).
"""
import argparse
import os
import shutil
import subprocess
import sys


def record(out_dir, steps):
    import torch
    try:
        from adaptalloc import _torch_native as native
    except ImportError:
        sys.path.insert(0, os.environ.get("AA_TORCH_NATIVE_PATH", "."))
        import _torch_native as native
    native.install(torch.cuda.device_count())
    from torch.cuda import _memory_viz

    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=256, nhead=8, dim_feedforward=1024,
                                             dropout=0.0, batch_first=True)
    model = torch.nn.Sequential(layer, torch.nn.Linear(256, 16)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    torch.cuda.memory._record_memory_history(max_entries=100000, stacks="python")
    for step in range(steps):
        x = torch.randn(16, 64 + 32 * (step % 4), 256, device="cuda")
        loss = model(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    pickle_path = os.path.join(out_dir, "memory_viz_timeline.pickle")
    torch.cuda.memory._dump_snapshot(pickle_path)
    torch.cuda.memory._record_memory_history(enabled=None)
    import pickle
    with open(pickle_path, "rb") as f:
        snap = pickle.load(f)
    html_path = os.path.join(out_dir, "memory_viz_timeline.html")
    with open(html_path, "w") as f:
        f.write(_memory_viz.trace_plot(snap))
    n = len(snap["device_traces"][0])
    print("wrote %s and %s (%d trace entries, %d steps)" % (pickle_path, html_path, n, steps))


def png(html_path):
    chrome = next((c for c in ("chromium", "chromium-browser", "google-chrome")
                   if shutil.which(c)), None)
    if chrome is None:
        sys.exit("memory_viz_image: no chromium here: take the HTML to a machine with one")
    out = os.path.splitext(html_path)[0] + ".png"
    r = subprocess.run([chrome, "--headless", "--no-sandbox", "--disable-gpu",
                        "--virtual-time-budget=15000", "--window-size=1400,900",
                        "--screenshot=" + os.path.abspath(out),
                        "file://" + os.path.abspath(html_path)],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0 or not os.path.exists(out):
        sys.exit("memory_viz_image: chromium failed: %s" % r.stderr[-2000:])
    print("wrote", out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out-dir", default=".")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--png", metavar="HTML", help="only screenshot this HTML into a PNG")
    a = ap.parse_args()
    if a.png:
        png(a.png)
        return
    os.makedirs(a.out_dir, exist_ok=True)
    record(a.out_dir, a.steps)


if __name__ == "__main__":
    main()
