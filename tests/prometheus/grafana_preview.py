#!/usr/bin/env python3
"""test_http_grafana_preview: the shipped Grafana dashboard drawn from a live
Prometheus that scrapes two demo ranks (tools/grafana-screenshot.sh, which
runs tools/grafana_preview.py and, where chromium and playwright-core exist,
photographs the page).

Checks, independently of the renderer's own --expect: every panel of
examples/grafana/adaptalloc.json is one element of the page (data-panel-id,
its type, a .panel-title with its title) and nothing else is; every panel's
every query returned series with data for rank 0 and rank 1 and no error, but
those over series a host-only job has not (the GPU's, a pool's cap: GPU_ONLY),
which must return none, and the heatmap's, summed by le; every panel type was
drawn; no panel but the GPU-only ones says "No data"; the picture, when taken,
is a PNG. Exit 0 pass, 1 fail, 77 skip (no prometheus).
"""
import argparse
import html.parser
import json
import os
import re
import shutil
import subprocess
import sys

RANKS = {"0", "1"}
# Queries over series that only a GPU (or a pool cap) gives: no series here.
GPU_ONLY = re.compile(r"adaptalloc_device_|adaptalloc_limit_bytes")


class Panels(html.parser.HTMLParser):
    """Elements with data-panel-id, their type and the text of their title."""

    def __init__(self):
        super().__init__()
        self.panels = []
        self.stack = []  # (tag, panel index or None, in title)
        self.nodata = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        cls = (a.get("class") or "").split()
        owner = next((s[1] for s in reversed(self.stack) if s[1] is not None), None)
        if "data-panel-id" in a:
            self.panels.append({"id": a["data-panel-id"], "type": a.get("data-panel-type"),
                                "title": "", "titles": 0})
            owner = len(self.panels) - 1
            self.stack.append((tag, owner, False))
            return
        in_title = "panel-title" in cls
        if in_title and owner is not None:
            self.panels[owner]["titles"] += 1
        if "nodata" in cls and owner is not None:
            self.nodata.append(self.panels[owner]["id"])
        self.stack.append((tag, owner, in_title))

    def handle_endtag(self, tag):
        while self.stack:
            t = self.stack.pop()
            if t[0] == tag:
                break

    def handle_data(self, data):
        if self.stack and any(s[2] for s in self.stack):
            owner = self.stack[-1][1]
            if owner is not None:
                self.panels[owner]["title"] += data


def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--seconds", default="20")
    a = ap.parse_args()
    if shutil.which("prometheus") is None:
        print("prometheus not installed: skipping")
        return 77
    shot = (shutil.which("node") and (shutil.which("chromium") or shutil.which("chromium-browser"))
            and os.path.isdir(os.path.join(a.source, "tests/browser/node_modules/playwright-core")))
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    env = dict(os.environ, AA_GRAFANA_OUT=a.work, AA_GRAFANA_SCRAPE="1s",
               AA_GRAFANA_RANGE="now-1m", AA_GRAFANA_NO_SHOT="0" if shot else "1")
    r = subprocess.run(["bash", os.path.join(a.source, "tools/grafana-screenshot.sh"),
                        os.path.abspath(a.build), a.seconds], env=env)
    if r.returncode == 77:
        print("skipping: tools/grafana-screenshot.sh found something missing")
        return 77
    if r.returncode != 0:
        fail("tools/grafana-screenshot.sh exited %d" % r.returncode)

    with open(os.path.join(a.source, "examples/grafana/adaptalloc.json")) as f:
        dash = json.load(f)
    want = {str(p["id"]): p for p in dash["panels"]}
    if len(want) != len(dash["panels"]):
        fail("the dashboard has duplicate panel ids")
    with open(os.path.join(a.work, "grafana.json")) as f:
        report = json.load(f)
    with open(os.path.join(a.work, "grafana.html")) as f:
        page = Panels()
        page.feed(f.read())

    # one element per panel, with its type and title
    got = {}
    for p in page.panels:
        if p["id"] in got:
            fail("panel %s appears twice in the page" % p["id"])
        got[p["id"]] = p
    if set(got) != set(want):
        fail("the page's panels %s are not the dashboard's %s" % (sorted(got), sorted(want)))
    for pid, p in want.items():
        g = got[pid]
        shown = g["title"].strip()
        if p["type"] == "row":  # drawn as Grafana does, after its fold mark
            shown = shown.lstrip("\u2304").strip()
        if g["titles"] != 1 or shown != p["title"]:
            fail("panel %s: title %r in the page, %r in the dashboard"
                 % (pid, g["title"], p["title"]))
        if g["type"] != p["type"]:
            fail("panel %s: type %r in the page, %r in the dashboard" % (pid, g["type"], p["type"]))
    gpu_only = {str(p["id"]) for p in dash["panels"]
                if any(GPU_ONLY.search(t["expr"]) for t in p.get("targets", []))}
    empty = [pid for pid in page.nodata if pid not in gpu_only]
    if empty:
        fail("panels without data in the page: %s" % empty)

    # every query of every panel: series with points for both ranks
    if report.get("problems"):
        fail("the renderer reported: %s" % report["problems"])
    for entry in report["panels"]:
        p = want[str(entry["id"])]
        if not entry["drawn"]:
            fail("panel %r: type %r not drawn" % (p["title"], p["type"]))
        if len(entry["targets"]) != len(p.get("targets", [])):
            fail("panel %r: %d queries run, %d in the dashboard"
                 % (p["title"], len(entry["targets"]), len(p.get("targets", []))))
        for t in entry["targets"]:
            if t["error"]:
                fail("panel %r %s: %s" % (p["title"], t["refId"], t["error"]))
            if GPU_ONLY.search(t["expr"]):
                if t["series"]:
                    fail("panel %r %s: series without a GPU: %s"
                         % (p["title"], t["refId"], t["series"][:2]))
                continue
            if p["type"] == "heatmap":  # summed over the ranks: by le, no rank label
                if not t["series"] or not all("le" in s["labels"] for s in t["series"]):
                    fail("panel %r %s: no buckets: %s" % (p["title"], t["refId"], t["series"][:2]))
                continue
            ranks = {s["labels"].get("rank") for s in t["series"] if s["points"] > 0}
            if not RANKS <= ranks:
                fail("panel %r %s: series for ranks %s, want %s\n  %s"
                     % (p["title"], t["refId"], sorted(x for x in ranks if x), sorted(RANKS),
                        t["expr"]))
            if "$" in t["expr"]:
                fail("panel %r %s: a variable left in %s" % (p["title"], t["refId"], t["expr"]))
    for name in ("job", "host", "rank", "pool"):
        v = report["variables"].get(name)
        if not v or not v["values"]:
            fail("template variable %s resolved to no values: %s" % (name, v))
    if set(report["variables"]["rank"]["values"]) != RANKS:
        fail("rank variable values %s" % report["variables"]["rank"]["values"])

    if shot:
        png = os.path.join(a.work, "grafana.png")
        with open(png, "rb") as f:
            head = f.read(8)
        if head != b"\x89PNG\r\n\x1a\n" or os.path.getsize(png) < 10000:
            fail("%s is not a picture" % png)
    print("ok: %d panels drawn with series for ranks 0 and 1%s"
          % (len(want), ", picture " + os.path.join(a.work, "grafana.png") if shot
             else " (no chromium or playwright-core: no picture)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
