#!/usr/bin/env python3
"""tools/memory_viz_image.py --png: standard library only, no torch, no network.

    python3 tests/tools/test_memory_viz_image.py args      # argument errors; runs anywhere
    python3 tests/tools/test_memory_viz_image.py render    # exit 77 without chromium or d3

args: each bad invocation exits non-zero with a message naming what is wrong
and writes no PNG. render: a page shaped like torch's trace_plot HTML (its
CDN import of MemoryViz.js and add_local_files), with a small stand-in
MemoryViz.js written here that imports d3 from the same skypack URLs as
torch's and draws one polygon per entry, rendered offline through the tool's
import map to the d3@5 of tests/browser/node_modules (npm ci --prefix
tests/browser; or AA_D3_DIR); then a stand-in that throws must fail with the
"never rendered" message, and a d3 file missing must be named.
"""
import base64
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TOOL = os.path.join(ROOT, "tools", "memory_viz_image.py")
CDN = "https://cdn.jsdelivr.net/gh/pytorch/pytorch@main/torch/utils/viz/MemoryViz.js"
failures = 0


def check(cond, what):
    global failures
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures += 1


def tool(*args, env=None):
    e = dict(os.environ)
    e.update(env or {})
    r = subprocess.run([sys.executable, TOOL] + list(args), capture_output=True, text=True,
                       timeout=240, env=e)
    return r.returncode, r.stdout + r.stderr


def page(tmp, entries, name="memory_viz_timeline.html"):
    """An HTML shaped like torch.cuda._memory_viz.trace_plot's output."""
    b64 = base64.b64encode(json.dumps(entries).encode()).decode()
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        f.write('<!DOCTYPE html>\n<html>\n<head>\n</head>\n<body>\n<script type="module">\n'
                'import {add_local_files} from "%s"\n'
                'const local_files = [{"name": "snapshot.pickle", "base64": "%s"}]\n'
                "add_local_files(local_files, 'Active Memory Timeline')\n"
                "</script>\n</body>\n" % (CDN, b64))
    return path


# A stand-in for MemoryViz.js (not PyTorch's code): the same CDN imports, one
# polygon per entry; d3.event read in a zoom handler checks the live binding.
# Each polygon's datum is {elem, size}, as the timeline's are, and hovering
# one writes "<elem> Addr: ..." and a frame into a context <pre> (%%HOVER%%:
# the mouseover handler, or nothing).
STANDIN = """'use strict';
import * as d3 from "https://cdn.skypack.dev/d3@5";
import {axisLeft} from "https://cdn.skypack.dev/d3-axis@1";
import {scaleLinear} from "https://cdn.skypack.dev/d3-scale@1";
import {zoom} from "https://cdn.skypack.dev/d3-zoom@1";
import {brushX} from "https://cdn.skypack.dev/d3-brush@1";
export function add_local_files(files, view_value) {
  %s
  const sizes = JSON.parse(atob(files[0].base64));
  const x = scaleLinear().domain([0, sizes.length]).range([40, 1000]);
  const y = scaleLinear().domain([0, Math.max(...sizes)]).range([500, 0]);
  const svg = d3.select('body').append('svg').attr('viewBox', '0 0 1000 500')
    .attr('style', 'width: 100%%; height: 90%%');
  svg.append('g').attr('transform', 'translate(40, 0)').call(axisLeft(y));
  const pane = d3.select('body').append('pre').text('none');
  const data = sizes.map((size, elem) => ({elem, size}));
  svg.selectAll('polygon').data(data).enter().append('polygon')
    .attr('points', (d, i) => `${x(i)},500 ${x(i + 1)},500 ${x(i + 1)},${y(d.size)} ${x(i)},${y(d.size)}`)
    .attr('fill', (d, i) => ['#4e79a7', '#f28e2c', '#e15759'][i %% 3])
    %%HOVER%%;
  svg.call(zoom().on('zoom', () => svg.attr('data-k', d3.event.transform.k)));
  svg.append('g').call(brushX());
}
"""


HOVER = """.on('mouseover', function () {
      const d = d3.select(this).datum();
      pane.text(`${d.elem} Addr: b${d.elem}_0, Size: ${d.size}B allocation\\n` +
                `train.py:42:step\\ntrain.py:90:<module>`);
    })"""


def standin(throw="", hover=HOVER):
    return STANDIN.replace("%%HOVER%%", hover) % throw


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    if head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        return None
    return struct.unpack(">II", head[16:24])


def test_args(tmp):
    html = page(tmp, [1, 2, 3])
    js = write(os.path.join(tmp, "standin.js"), standin())
    rc, out = tool("--png", os.path.join(tmp, "absent.html"))
    check(rc != 0 and "absent.html: no such file" in out, "missing HTML named: " + out.strip())
    rc, out = tool("--png", js)
    check(rc != 0 and "is not torch.cuda._memory_viz.trace_plot's HTML" in out,
          "a non-trace_plot page refused: " + out.strip())
    rc, out = tool("--png", html, "--viz-js", os.path.join(tmp, "absent.js"))
    check(rc != 0 and "--viz-js" in out and "absent.js: no such file" in out,
          "missing --viz-js named: " + out.strip())
    rc, out = tool("--png", html, "--viz-js", js, "--d3", tmp)
    check(rc != 0 and "--d3 %s: no d3/package.json" % tmp in out,
          "--d3 without d3 named: " + out.strip())
    for opt in ("--viz-js", "--d3", "--out"):
        rc, out = tool(opt, js)
        check(rc == 2 and "%s goes with --png HTML" % opt in out, opt + " without --png refused")
    rc, out = tool("--hover", "none")
    check(rc == 2 and "--hover goes with --png HTML" in out, "--hover without --png refused")
    rc, out = tool("--png", html, "--hover", "smallest")
    check(rc == 2 and "invalid choice" in out, "--hover smallest refused")
    for opt, val in (("--max-entries", "10"), ("--replay", "/bin/true")):
        rc, out = tool(opt, val)
        check(rc == 2 and "%s goes with --bounded" % opt in out, opt + " without --bounded refused")
    rc, out = tool("--bounded", "--max-entries", "0")
    check(rc == 2 and "--max-entries must be at least 1" in out, "--max-entries 0 refused")
    rc, out = tool("--png", html, "--bounded")
    check(rc == 2 and "one at a time" in out, "--png with --bounded refused")
    for bad in ("10x10", "wide", "1400x", "9000x800"):
        rc, out = tool("--png", html, "--size", bad)
        check(rc == 2 and "is not WIDTHxHEIGHT" in out, "--size %s refused" % bad)
    # a node_modules whose d3 lacks d3-brush, which the page imports: named
    mods = os.path.join(tmp, "partial", "node_modules")
    for name in ("d3", "d3-axis", "d3-scale", "d3-zoom"):
        os.makedirs(os.path.join(mods, name))
        write(os.path.join(mods, name, "package.json"),
              json.dumps({"name": name, "version": "1.0.0", "module": "index.js"}))
    rc, out = tool("--png", html, "--viz-js", js, "--d3", os.path.dirname(mods))
    check(rc != 0 and "imports https://cdn.skypack.dev/d3-brush@1" in out
          and "has no d3-brush" in out, "a missing d3 module named: " + out.strip())
    check(not any(n.endswith(".png") for n in os.listdir(tmp)), "no PNG written by any of these")


def find_d3():
    for cand in (os.environ.get("AA_D3_DIR"), os.path.join(ROOT, "tests", "browser", "node_modules")):
        if cand and os.path.isfile(os.path.join(cand, "d3", "package.json")):
            return cand
    return None


def test_render(tmp, d3):
    sizes = [5, 9, 14, 7, 22, 30, 12, 3, 18, 26]
    html = page(tmp, sizes)
    js = write(os.path.join(tmp, "standin.js"), standin())
    out_png = os.path.join(tmp, "out.png")
    rc, out = tool("--png", html, "--viz-js", js, "--d3", d3, "--out", out_png,
                   "--size", "900x500")
    check(rc == 0, "renders offline: " + out.strip())
    check("d3-brush@1 -> d3-brush" in out and "d3@5 -> d3 5." in out,
          "the CDN imports mapped to the local packages")
    check("%d polygons" % len(sizes) in out, "every entry drawn (%d polygons)" % len(sizes))
    check(png_size(out_png) == (900, 500), "a 900x500 PNG: %s" % (png_size(out_png),))
    big = sizes.index(max(sizes))
    check("hovered: %d Addr: b%d_0, Size: %dB allocation; 2 Python frames shown" % (
        big, big, max(sizes)) in out and "train.py:42:step" in out,
        "the largest allocation hovered, its frames named: " + out.strip())

    rc, out = tool("--png", html, "--viz-js", js, "--d3", d3, "--out", out_png, "--hover", "none")
    check(rc == 0 and "hovered" not in out, "--hover none: no hover: " + out.strip())
    nohover = write(os.path.join(tmp, "nohover.js"), standin(hover=""))
    bad_png = os.path.join(tmp, "bad.png")
    rc, out = tool("--png", html, "--viz-js", nohover, "--d3", d3, "--out", bad_png)
    check(rc != 0 and "showed nothing in the context pane" in out,
          "a hover that shows nothing fails: " + out.strip())
    check(not os.path.exists(bad_png), "and writes no PNG")

    bad = write(os.path.join(tmp, "throws.js"), standin("throw new Error('stand-in fails');"))
    rc, out = tool("--png", html, "--viz-js", bad, "--d3", d3, "--out", bad_png)
    check(rc != 0 and "never rendered" in out, "a page that draws nothing fails: " + out.strip())
    check(not os.path.exists(bad_png), "and writes no PNG")

    # d3-zoom's sources without its zoom.js: the missing file is named
    broken = os.path.join(tmp, "broken", "node_modules")
    shutil.copytree(d3, broken, symlinks=True)
    os.remove(os.path.join(broken, "d3-zoom", "src", "zoom.js"))
    rc, out = tool("--png", html, "--viz-js", js, "--d3", broken, "--out", bad_png)
    check(rc != 0 and "not served: 404 /d3/d3-zoom/src/zoom.js" in out,
          "an unserved d3 file named: " + out.strip())


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "args"
    with tempfile.TemporaryDirectory(prefix="test_memviz.") as tmp:
        if mode == "args":
            test_args(tmp)
        elif mode == "render":
            chrome = next((c for c in (os.environ.get("CHROMIUM"), "chromium", "chromium-browser",
                                       "google-chrome") if c and shutil.which(c)), None)
            d3 = find_d3()
            if chrome is None or d3 is None:
                print("SKIP: %s" % ("no chromium" if chrome is None else
                                    "no d3@5 (npm ci --prefix tests/browser, or AA_D3_DIR)"))
                return 77
            test_render(tmp, d3)
        else:
            print("usage: test_memory_viz_image.py args|render")
            return 2
    print("%d failure(s)" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
