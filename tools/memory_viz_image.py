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

    python3 tools/memory_viz_image.py --bounded [--out-dir DIR] [--steps N]
        [--max-entries N] [--replay PATH]

The same loop traced by adaptalloc itself, bounded, as an operator traces a
long job (docs/operating.md, "Tracing a live job"): a child process with
ADAPTALLOC_DB=DIR/memory_viz_bounded.db asks for Python frames
(_record_memory_history(stacks="python")) and a live sampled trace
(adaptalloc.trace: 1 in 4 requests and every one of 1 MiB or more), runs
the loop and holds a 64 MiB tensor at the end; then `adaptalloc-replay
export --format torch-snapshot --max-entries N` (default 2000) writes
DIR/memory_viz_bounded.pickle and trace_plot DIR/memory_viz_bounded.html.
The replay tool: --replay, $AA_REPLAY_BIN, else build*/tools/ of this tree.

    python3 tools/memory_viz_image.py --png DIR/memory_viz_timeline.html \
        [--viz-js DIR/MemoryViz.js] [--d3 NODE_MODULES] [--out PNG] [--size 1400x800]
        [--hover largest|none]

Anywhere with chromium: screenshots that HTML into memory_viz_timeline.png
beside it (or --out), headless. With --hover largest (the default) the
page's largest plotted allocation is hovered once the timeline is drawn,
as a user's pointer would, so that the view's context pane below the plot
shows that block: its address, size and the Python frames that allocated
it; the tool fails when the pane does not show it. The page imports MemoryViz.js from
cdn.jsdelivr.net and MemoryViz.js imports d3@5, d3-axis, d3-scale, d3-zoom
and d3-brush from cdn.skypack.dev; the tool serves the page from 127.0.0.1
with an import map that sends those URLs to a local MemoryViz.js (--viz-js;
default torch's own, else the one beside the HTML, else the CDN) and to the
ES-module sources of d3@5 in a node_modules folder (--d3; default
~/.cache/adaptalloc/memory_viz, filled by npm when npm is here), so it needs
no network once those are local. It waits until the timeline's SVG has its
polygons and fails otherwise, naming what the page could not load.

Exit 0 done, 1 the page did not render (the message names what it could not
load), 2 bad input or usage: an HTML or MemoryViz.js that is missing, not a
file, over 1 GiB, not UTF-8, or not trace_plot's page; a --out that is an
input (the HTML or --viz-js, directly or through a link) or cannot be
written. Each is one line naming the file, said before chromium starts; the
PNG is written through a temporary renamed into place, whole or not at all
(python/adaptalloc/_outfile.py, the rule every program of the project
follows).
"""
import argparse
import functools
import http.server
import importlib.util
import json
import os
import posixpath
import re
import shutil
import subprocess
import sys
import tempfile
import threading

PAGE_MAX_BYTES = 1 << 30


def _outfile():
    """adaptalloc's one rule for outputs and bounded inputs
    (python/adaptalloc/_outfile.py), loaded by its path: the tool needs no
    installed package."""
    path = os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "python",
                        "adaptalloc", "_outfile.py")
    spec = importlib.util.spec_from_file_location("aa_outfile", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


outfile = _outfile()


def load_native():
    try:
        from adaptalloc import _torch_native as native
    except ImportError:
        sys.path.insert(0, os.environ.get("AA_TORCH_NATIVE_PATH", "."))
        import _torch_native as native
    return native


def train_loop(torch, steps):
    """A small transformer's training steps, the sequence length changing
    every step (the timeline's shape)."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=256, nhead=8, dim_feedforward=1024,
                                             dropout=0.0, batch_first=True)
    model = torch.nn.Sequential(layer, torch.nn.Linear(256, 16)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(steps):
        x = torch.randn(16, 64 + 32 * (step % 4), 256, device="cuda")
        loss = model(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()


def record_child_bounded(out_dir, steps):
    """The --bounded child: ADAPTALLOC_DB is set by the parent."""
    import torch
    load_native().install(torch.cuda.device_count())
    import adaptalloc
    torch.cuda.memory._record_memory_history(stacks="python")
    adaptalloc.trace(60, sample=4, min_bytes=1 << 20)
    train_loop(torch, steps)
    held = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")  # live at the end
    adaptalloc.trace_off()
    torch.cuda.memory._record_memory_history(enabled=None)
    print("held 64 MiB at 0x%x" % held.data_ptr())


def replay_bin(given):
    root = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
    import glob
    for c in [given, os.environ.get("AA_REPLAY_BIN")] + \
            sorted(glob.glob(os.path.join(root, "build*", "tools", "adaptalloc-replay"))):
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    raise VizError("no adaptalloc-replay (--replay PATH, AA_REPLAY_BIN, or build the tree: "
                   "cmake --build build --target adaptalloc-replay)")


def record_bounded(out_dir, steps, max_entries, replay):
    tool = replay_bin(replay)
    db = os.path.join(out_dir, "memory_viz_bounded.db")
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(db + suffix):
            os.remove(db + suffix)  # the tool's own scratch database of an earlier run
    env = dict(os.environ, ADAPTALLOC_DB=db, ADAPTALLOC_HTTP="off")
    env.pop("ADAPTALLOC_TRACE", None)
    r = subprocess.run([sys.executable, os.path.realpath(__file__), "--_child-bounded", out_dir,
                        "--steps", str(steps)], env=env, capture_output=True, text=True,
                       timeout=600)
    if r.returncode != 0:
        raise VizError("the traced run failed (exit %d): %s" % (r.returncode, r.stderr[-1500:]))
    pickle_path = os.path.join(out_dir, "memory_viz_bounded.pickle")
    html_path = os.path.join(out_dir, "memory_viz_bounded.html")
    r = subprocess.run([tool, "export", "--format", "torch-snapshot", "--db", db, "-o",
                        pickle_path, "--max-entries", str(max_entries), "--json"],
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise VizError("adaptalloc-replay export failed (exit %d): %s"
                       % (r.returncode, r.stderr[-1500:]))
    summary = json.loads(r.stdout)
    import pickle
    from torch.cuda import _memory_viz
    with open(pickle_path, "rb") as f:
        snap = pickle.load(f)
    outfile.write_all([(html_path, _memory_viz.trace_plot(snap))])
    print("wrote %s and %s (%s entries, %s with frames; %s)" % (
        pickle_path, html_path, summary.get("entries"), summary.get("with_frames"),
        r.stdout.strip()))


def record(out_dir, steps):
    import torch
    load_native().install(torch.cuda.device_count())
    from torch.cuda import _memory_viz

    torch.cuda.memory._record_memory_history(max_entries=100000, stacks="python")
    train_loop(torch, steps)
    pickle_path = os.path.join(out_dir, "memory_viz_timeline.pickle")
    html_path = os.path.join(out_dir, "memory_viz_timeline.html")
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    import pickle
    outfile.write_all([(pickle_path, pickle.dumps(snap))], binary=True)
    outfile.write_all([(html_path, _memory_viz.trace_plot(snap))])
    n = len(snap["device_traces"][0])
    print("wrote %s and %s (%d trace entries, %d steps)" % (pickle_path, html_path, n, steps))


# --- --png: screenshot the trace_plot HTML, offline when MemoryViz.js and d3 are local ---

CDN_VIZ_RE = re.compile(r'from\s+"(https://[^"]*/MemoryViz\.js)"')
CDN_D3_RE = re.compile(r'from\s+["\'](https://cdn\.skypack\.dev/(d3(?:-[a-z]+)?)@[^"\']*)["\']')
D3_CACHE = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                        "adaptalloc", "memory_viz")


# --hover largest: once the timeline's polygons are drawn, the one with the
# largest allocation (its d3 datum's size; not the "summarized" band, not the
# minimap) gets a mouseover, which MemoryViz.js's context pane answers with
# the block's address, size and frames. Page time is virtual (chromium's
# --virtual-time-budget), so the retries cost no wall time.
HOVER_JS = """<script>
(function () {
  var tries = 0;
  function hover() {
    var best = null, size = -1;
    document.querySelectorAll("svg polygon").forEach(function (p) {
      var d = p.__data__;
      if (d && d.elem !== "summarized" && typeof d.size === "number" && d.size > size) {
        best = p;
        size = d.size;
      }
    });
    if (best === null) {
      if (++tries < 150) setTimeout(hover, 100);
      return;
    }
    best.dispatchEvent(new MouseEvent("mouseover", {bubbles: true}));
  }
  window.addEventListener("load", function () { setTimeout(hover, 200); });
})();
</script>"""
FRAME_LINE_RE = re.compile(r"^\S+\.py:\d+:\S+$", re.M)


class VizError(Exception):
    """A --png failure, with the message to print."""


class InputError(VizError):
    """A --png input or output that cannot be used (exit 2)."""


def torch_viz_js():
    """torch's own MemoryViz.js, found without importing torch, or None."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(list(spec.submodule_search_locations)[0], "utils", "viz", "MemoryViz.js")
    return path if os.path.isfile(path) else None


def not_a_file(path):
    """Why path, which os.path.isfile refused, is not an input."""
    return "not a regular file" if os.path.exists(path) else "no such file"


def pick_viz_js(html_path, viz_js):
    """The local MemoryViz.js to serve: --viz-js, torch's, the one beside the
    HTML; None means the page's CDN copy."""
    if viz_js is not None:
        if not os.path.isfile(viz_js):
            raise InputError("--viz-js %s: %s" % (viz_js, not_a_file(viz_js)))
        return viz_js
    for path in (torch_viz_js(), os.path.join(os.path.dirname(html_path), "MemoryViz.js")):
        if path and os.path.isfile(path):
            return path
    return None


def node_modules_of(d3_dir):
    """DIR itself when it holds d3/, else DIR/node_modules; None when neither does."""
    for cand in (d3_dir, os.path.join(d3_dir, "node_modules")):
        if os.path.isfile(os.path.join(cand, "d3", "package.json")):
            return cand
    return None


def pick_d3(d3_dir, need_fetch):
    """A node_modules folder holding d3@5 and its modules: --d3, the cache
    folder, or the cache filled with npm (registry.npmjs.org, not the CDNs).
    None means the page's CDN copies."""
    if d3_dir is not None:
        mods = node_modules_of(d3_dir)
        if mods is None:
            raise VizError("--d3 %s: no d3/package.json there or in its node_modules "
                           "(npm install --prefix %s d3@5)" % (d3_dir, d3_dir))
        return mods
    mods = node_modules_of(D3_CACHE)
    if mods is not None or not need_fetch:
        return mods
    npm = shutil.which("npm")
    if npm is None:
        return None
    print("memory_viz_image: fetching d3@5 with npm into", D3_CACHE)
    os.makedirs(D3_CACHE, exist_ok=True)
    r = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--prefix", D3_CACHE, "d3@5"],
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise VizError("npm install d3@5 into %s failed: %s" % (D3_CACHE, r.stderr[-1500:]))
    return node_modules_of(D3_CACHE)


def d3_entry(mods, name):
    """URL path of package NAME's ES-module entry (its package.json "module")."""
    try:
        meta = outfile.load_json(os.path.join(mods, name, "package.json"), "d3's",
                                 PAGE_MAX_BYTES, dict)
    except outfile.FileError as e:
        raise VizError("%s: no usable %s/package.json (%s)" % (mods, name, e))
    if not all(isinstance(meta.get(k, ""), str) for k in ("module", "jsnext:main", "version")):
        raise VizError("%s: %s/package.json: module, jsnext:main or version is not a string"
                       % (mods, name))
    entry = meta.get("module") or meta.get("jsnext:main")
    if not entry:
        raise VizError("%s/%s (version %s) has no ES-module entry (\"module\" in package.json): "
                       "MemoryViz.js needs d3@5" % (mods, name, meta.get("version")))
    return "/d3/%s/%s" % (name, posixpath.normpath(entry)), meta.get("version", "?")


def import_map(viz_url, viz_js, mods):
    """The page's import map: MemoryViz.js's CDN URL to the local copy; its
    skypack d3 URLs and every bare d3-* name the d3 sources import to the
    packages in MODS."""
    imports = {}
    notes = []
    if viz_js is not None:
        imports[viz_url] = "/MemoryViz.js"
        try:
            cdn = CDN_D3_RE.findall(outfile.read_text(viz_js, "MemoryViz.js", PAGE_MAX_BYTES))
        except outfile.FileError as e:
            raise InputError(str(e))
        if mods is not None:
            for name in sorted(n for n in os.listdir(mods) if n == "d3" or n.startswith("d3-")):
                if os.path.isfile(os.path.join(mods, name, "package.json")):
                    imports[name] = d3_entry(mods, name)[0]
            for url, name in cdn:
                if not os.path.isfile(os.path.join(mods, name, "package.json")):
                    raise VizError("MemoryViz.js imports %s, but %s has no %s "
                                   "(npm install d3@5 brings it)" % (url, mods, name))
                path, version = d3_entry(mods, name)
                imports[url] = path
                notes.append("%s -> %s %s" % (url.rsplit("/", 1)[1], name, version))
    return {"imports": imports}, notes


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Serves the temp dir; d3's sources import "./foo" without ".js", so a
    missing path is tried with ".js" and "/index.js"; records what was missing."""
    missing = None

    def translate_path(self, path):
        p = super().translate_path(path)
        if not os.path.exists(p):
            for alt in (p + ".js", os.path.join(p, "index.js")):
                if os.path.isfile(alt):
                    return alt
        return p

    def send_error(self, code, message=None, explain=None):
        if self.path != "/favicon.ico":
            self.missing.append("%d %s" % (code, self.path))
        super().send_error(code, message, explain)

    def log_message(self, fmt, *args):
        pass


def chromium_path():
    for c in (os.environ.get("CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if c and shutil.which(c):
            return shutil.which(c)
    return None


def run_chromium(chrome, url, extra, size):
    w, h = size
    cmd = [chrome, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
           "--hide-scrollbars", "--enable-logging=stderr", "--v=0",
           "--virtual-time-budget=20000", "--window-size=%d,%d" % (w, h)] + extra + [url]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def console_lines(stderr):
    return [l for l in stderr.splitlines() if "CONSOLE" in l or "Uncaught" in l][-8:]


def png_output(html_path, out, viz_js):
    """The PNG to write, checked before any work (InputError): never the HTML
    or MemoryViz.js, directly or through a link."""
    out = out or os.path.splitext(html_path)[0] + ".png"
    # without --viz-js, the copies pick_viz_js may serve are inputs too
    # (torch's, the one beside the HTML): whichever is picked later
    viz = [viz_js] if viz_js is not None else [
        torch_viz_js(), os.path.join(os.path.dirname(html_path), "MemoryViz.js")]
    try:
        outfile.check_output(out, [html_path] + viz, "--out")
    except outfile.FileError as e:
        raise InputError(str(e))
    return out


def hovered_pane(dom):
    """The context pane's text after the hover (MemoryViz.js's <pre> that
    starts with the element's id and "Addr: "), unescaped; None when none."""
    import html as htmlmod
    for m in re.finditer(r"<pre[^>]*>([^<]*)</pre>", dom):
        text = htmlmod.unescape(m.group(1))
        if re.match(r"\d+ Addr: ", text):
            return text
    return None


def png(html_path, out=None, viz_js=None, d3_dir=None, size=(1400, 800), hover="largest"):
    out = png_output(html_path, out, viz_js)
    if not os.path.isfile(html_path):
        raise InputError("--png %s: %s" % (html_path, not_a_file(html_path)))
    try:
        page = outfile.read_text(html_path, "--png", PAGE_MAX_BYTES)
    except outfile.FileError as e:
        raise InputError(str(e))
    m = CDN_VIZ_RE.search(page)
    if m is None or "add_local_files" not in page:
        raise InputError("%s is not torch.cuda._memory_viz.trace_plot's HTML (no import of "
                         "MemoryViz.js's add_local_files)" % html_path)
    viz_url = m.group(1)
    viz_js = pick_viz_js(html_path, viz_js)
    mods = pick_d3(d3_dir, need_fetch=viz_js is not None)
    imap, notes = import_map(viz_url, viz_js, mods)
    chrome = chromium_path()
    if chrome is None:
        raise VizError("no chromium here (apt-get install chromium, or CHROMIUM=PATH)")
    sources = ["MemoryViz.js: " + (viz_js or "%s (CDN: needs the network)" % viz_url),
               "d3: " + (mods or "cdn.skypack.dev (CDN: needs the network)")]
    print("memory_viz_image:", "; ".join(sources + notes))
    with tempfile.TemporaryDirectory(prefix="memviz.") as tmp:
        if viz_js is not None:
            shutil.copyfile(viz_js, os.path.join(tmp, "MemoryViz.js"))
        if mods is not None:
            os.symlink(os.path.abspath(mods), os.path.join(tmp, "d3"))
        head = '<script type="importmap">%s</script>' % json.dumps(imap)
        if hover == "largest":
            head += "\n" + HOVER_JS
        page2 = page.replace("<head>", "<head>\n" + head, 1) if "<head>" in page else head + page
        with open(os.path.join(tmp, "index.html"), "w", encoding="utf-8") as f:
            f.write(page2)
        missing = []
        handler = functools.partial(type("H", (_Handler,), {"missing": missing}), directory=tmp)
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = "http://127.0.0.1:%d/index.html" % server.server_address[1]
        try:
            r = run_chromium(chrome, url, ["--dump-dom"], size)
            dom = r.stdout
            polygons = len(re.findall(r"<polygon", dom))
            if r.returncode != 0 or polygons < 2:
                why = ["the Active Memory Timeline never rendered (%d polygons in the page's "
                       "SVG after 20 s of page time)" % polygons]
                if missing:
                    why.append("not served: " + ", ".join(sorted(set(missing))))
                why += [s for s in sources if "CDN" in s]
                why += ["console: " + l.strip() for l in console_lines(r.stderr)]
                if r.returncode != 0:
                    why.append("chromium exit %d: %s" % (r.returncode, r.stderr[-800:]))
                raise VizError("\n  ".join(why))
            pane = hovered_pane(dom) if hover == "largest" else None
            if hover == "largest" and pane is None:
                raise VizError("the timeline rendered (%d polygons) but hovering its largest "
                               "allocation showed nothing in the context pane" % polygons)
            try:
                with outfile.replacing(out, binary=True) as shot:
                    shot.file.close()  # chromium writes the temporary by its name
                    r = run_chromium(chrome, url,
                                     ["--screenshot=" + os.path.abspath(shot.name)], size)
                    if r.returncode != 0 or not os.path.isfile(shot.name) or \
                            os.path.getsize(shot.name) == 0:
                        raise VizError("chromium's screenshot failed (exit %d): %s"
                                       % (r.returncode, r.stderr[-1500:]))
            except outfile.FileError as e:
                raise InputError(str(e))
        finally:
            server.shutdown()
            server.server_close()
    print("wrote %s (%dx%d, %d polygons in the timeline)" % (out, size[0], size[1], polygons))
    if pane is not None:
        first = pane.splitlines()[0]
        frames = FRAME_LINE_RE.findall(pane)
        print("hovered: %s; %d Python frame%s shown" % (first, len(frames),
                                                       "" if len(frames) == 1 else "s"))
        for f in frames[:3]:
            print("  " + f)
    return out


def parse_size(text):
    m = re.fullmatch(r"(\d+)x(\d+)", text or "")
    if not m or not (200 <= int(m.group(1)) <= 8000 and 200 <= int(m.group(2)) <= 8000):
        raise argparse.ArgumentTypeError("%r is not WIDTHxHEIGHT, each 200..8000 pixels" % text)
    return int(m.group(1)), int(m.group(2))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out-dir", default=".")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--png", metavar="HTML", help="only screenshot this HTML into a PNG")
    ap.add_argument("--out", metavar="PNG", help="with --png: the PNG to write "
                    "(default: the HTML's name with .png)")
    ap.add_argument("--viz-js", metavar="PATH", help="with --png: a local MemoryViz.js "
                    "(default: torch's, else the one beside the HTML, else the CDN's)")
    ap.add_argument("--d3", metavar="DIR", help="with --png: a node_modules folder holding d3@5 "
                    "(default: %s, filled with npm when npm is here)" % D3_CACHE)
    ap.add_argument("--size", type=parse_size, default=(1400, 800), metavar="WxH",
                    help="with --png: the window and image size (default 1400x800)")
    ap.add_argument("--hover", choices=("largest", "none"), default=None,
                    help="with --png: hover the largest allocation so its frames show "
                    "(default largest)")
    ap.add_argument("--bounded", action="store_true", help="record through adaptalloc's own "
                    "live trace, exported bounded (needs the replay tool)")
    ap.add_argument("--max-entries", type=int, default=None,
                    help="with --bounded: the export's bound (default 2000)")
    ap.add_argument("--replay", metavar="PATH", help="with --bounded: adaptalloc-replay")
    ap.add_argument("--_child-bounded", dest="child_bounded", metavar="DIR",
                    help=argparse.SUPPRESS)
    a = ap.parse_args()
    if not a.png:
        for opt, val in (("--out", a.out), ("--viz-js", a.viz_js), ("--d3", a.d3),
                         ("--hover", a.hover)):
            if val is not None:
                ap.error("%s goes with --png HTML" % opt)
    if not a.bounded:
        for opt, val in (("--max-entries", a.max_entries), ("--replay", a.replay)):
            if val is not None:
                ap.error("%s goes with --bounded" % opt)
    if a.png and a.bounded:
        ap.error("--png and --bounded: one at a time (record, then screenshot the HTML)")
    if a.steps < 1:
        ap.error("--steps must be at least 1")
    if a.max_entries is not None and a.max_entries < 1:
        ap.error("--max-entries must be at least 1")
    if a.child_bounded:
        record_child_bounded(a.child_bounded, a.steps)
        return
    if a.png:
        try:
            png(a.png, a.out, a.viz_js, a.d3, a.size, a.hover or "largest")
        except InputError as e:
            print("memory_viz_image: %s" % e, file=sys.stderr)
            sys.exit(2)
        except VizError as e:
            sys.exit("memory_viz_image: %s" % e)
        return
    stem = "memory_viz_bounded" if a.bounded else "memory_viz_timeline"
    try:
        os.makedirs(a.out_dir, exist_ok=True)
        for name in (stem + ".pickle", stem + ".html"):
            outfile.check_output(os.path.join(a.out_dir, name), [], "--out-dir")
    except (OSError, outfile.FileError) as e:
        print("memory_viz_image: --out-dir %s: %s" % (a.out_dir, getattr(e, "strerror", None)
                                                     or e), file=sys.stderr)
        sys.exit(2)
    if a.bounded:
        try:
            record_bounded(a.out_dir, a.steps, a.max_entries or 2000, a.replay)
        except VizError as e:
            sys.exit("memory_viz_image: %s" % e)
        return
    record(a.out_dir, a.steps)

if __name__ == "__main__":
    main()
