#!/usr/bin/env python3
"""Two ranks of adaptalloc-demo scraped by a real Prometheus on loopback.

The scrape configuration is a plain static list of the two targets, with no
labels and no relabelling: the rank and host on every series come from the
processes themselves (RANK), as they must for a static configuration.
Every query of the shipped Grafana dashboard (template variables replaced by
'.*', $__rate_interval by 30s) and every rule of the shipped rules file (as
Prometheus loaded it, from /api/v1/rules) is evaluated through the HTTP API;
each must return at least one series for rank 0 and one for rank 1, except
those that need a GPU, a pool cap or the DCGM exporter (GPU_ONLY), which must
return none here (the demo runs on the host backend: no device series at all).
The promtool checks of the rules, their unit tests and examples/prometheus.yml
run first. Exit 0 pass, 1 fail, 77 skip (no prometheus or promtool).
"""
import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

RANKS = (0, 1)
# Recording rules and dashboard queries over series a host-only job has not:
# the GPU's (adaptalloc_device_*), a pool's cap (limit 0 here), DCGM's.
GPU_ONLY_RULES = {"adaptalloc:device_headroom_ratio", "adaptalloc:cap_headroom_ratio",
                  "adaptalloc:dcgm_fb_used_bytes", "adaptalloc:dcgm_nonallocator_bytes"}
GPU_ONLY_SERIES = re.compile(r"adaptalloc_device_|adaptalloc:(device|cap)_headroom|"
                             r"adaptalloc:dcgm_|DCGM_|adaptalloc_limit_bytes")


def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.load(r)


def query(base, expr):
    url = base + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        doc = get_json(url)
    except urllib.error.HTTPError as e:
        fail("query refused (%d): %s\n  %s" % (e.code, expr, e.read().decode()[:300]))
    if doc.get("status") != "success":
        fail("query failed: %s: %s" % (expr, doc))
    return doc["data"]["result"]


def ranks_of(result):
    return {s["metric"].get("rank") for s in result}


def promtool(tool, *args):
    r = subprocess.run([tool, *args], capture_output=True, text=True)
    if r.returncode != 0:
        fail("promtool %s: %s%s" % (" ".join(args), r.stdout, r.stderr))


def dashboard_queries(path):
    with open(path) as f:
        dash = json.load(f)
    names = [v["name"] for v in dash["templating"]["list"] if v["type"] == "query"]
    for want in ("job", "host", "rank", "pool"):
        if want not in names:
            fail("dashboard: no template variable %r" % want)
    out = []
    panels = []
    for p in dash["panels"]:
        panels += [p] + list(p.get("panels", []))
    for p in panels:
        if p.get("type") in ("row", "text"):
            continue
        if not p.get("targets"):
            fail("dashboard panel %r has no query" % p.get("title"))
        for t in p["targets"]:
            e = t["expr"].replace("$__rate_interval", "30s").replace("$__interval", "15s")
            e = re.sub(r"\$\{?(job|host|instance|rank|pool|device)\}?\b", ".*", e)
            if "$" in e:
                fail("dashboard panel %r: a variable left in %s" % (p["title"], e))
            # a heatmap sums the ranks by le: its series name no rank
            out.append((p["title"] if p["type"] != "heatmap" else "heatmap:" + p["title"], e))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--demo", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    prom = shutil.which("prometheus")
    tool = shutil.which("promtool")
    if prom is None or tool is None:
        print("prometheus or promtool not installed: skipping")
        return 77
    rules = os.path.join(a.source, "examples/prometheus/adaptalloc-rules.yml")
    promtool(tool, "check", "rules", rules)
    promtool(tool, "test", "rules",
             os.path.join(a.source, "examples/prometheus/adaptalloc-rules.test.yml"))
    promtool(tool, "check", "config", os.path.join(a.source, "examples/prometheus.yml"))
    queries = dashboard_queries(os.path.join(a.source, "examples/grafana/adaptalloc.json"))

    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    procs = []
    try:
        targets = []
        for r in RANKS:
            port = free_port()
            env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r),
                       ADAPTALLOC_HTTP="127.0.0.1:%d" % port,
                       ADAPTALLOC_DB=os.path.join(a.work, "rank%d.db" % r),
                       ADAPTALLOC_POLICY_DIR=os.path.join(a.source, "policies"))
            procs.append(subprocess.Popen([a.demo, "--seconds", "50", "--quiet"], env=env,
                                          stdout=subprocess.DEVNULL,
                                          stderr=open(os.path.join(a.work, "demo%d.log" % r), "w")))
            targets.append("127.0.0.1:%d" % port)
        # a static list, no labels: the ranks must tell themselves apart
        shutil.copy(rules, os.path.join(a.work, "rules.yml"))
        with open(os.path.join(a.work, "prometheus.yml"), "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                    "rule_files: [rules.yml]\n"
                    "scrape_configs:\n  - job_name: adaptalloc\n    static_configs:\n"
                    "      - targets: %s\n" % json.dumps(targets))
        pport = free_port()
        base = "http://127.0.0.1:%d" % pport
        procs.append(subprocess.Popen(
            [prom, "--config.file=" + os.path.join(a.work, "prometheus.yml"),
             "--storage.tsdb.path=" + os.path.join(a.work, "tsdb"),
             "--web.listen-address=127.0.0.1:%d" % pport],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(a.work, "prometheus.log"), "w")))

        # both targets up, then enough scrapes for 30 s rates to have points
        deadline = time.time() + 40
        while True:
            try:
                # Prometheus answers 503 until its storage is open (slow on a busy machine)
                urllib.request.urlopen(base + "/-/ready", timeout=5).close()
                # up has the target's labels only: the ranks are in the series
                up = query(base, 'up{job="adaptalloc"} == 1')
                if len(up) == len(RANKS) and \
                        ranks_of(query(base, "adaptalloc_info")) == {str(r) for r in RANKS}:
                    break
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            if time.time() > deadline:
                fail("the two ranks were not scraped in 40 s (see %s)" % a.work)
            time.sleep(0.5)
        time.sleep(12)

        want = {str(r) for r in RANKS}
        checked = 0
        for title, e in queries:
            if GPU_ONLY_SERIES.search(e):
                got = query(base, e)
                if got:
                    fail("dashboard panel %r: series without a GPU: %s" % (title, got[:2]))
                continue
            if title.startswith("heatmap:"):
                got = query(base, e)
                if not got or not all("le" in s["metric"] for s in got):
                    fail("dashboard panel %r: no buckets:\n  %s" % (title, e))
                checked += 1
                continue
            got = ranks_of(query(base, e))
            if not want <= got:
                fail("dashboard panel %r: series for ranks %s, want %s:\n  %s" %
                     (title, sorted(x for x in got if x), sorted(want), e))
            checked += 1
        rules_doc = get_json(base + "/api/v1/rules")["data"]["groups"]
        nrules = 0
        for g in rules_doc:
            for rule in g["rules"]:
                if rule["health"] != "ok" and rule.get("lastError"):
                    fail("rule %s: %s" % (rule["name"], rule["lastError"]))
                if rule["type"] != "recording":
                    if not rule.get("annotations", {}).get("runbook_url"):
                        fail("alert %s has no runbook_url" % rule["name"])
                    continue
                if rule["name"] in GPU_ONLY_RULES:
                    got = query(base, rule["name"])
                    if got:
                        fail("recording rule %s has series without a GPU: %s"
                             % (rule["name"], got[:2]))
                    continue
                nrules += 1
                got = ranks_of(query(base, rule["query"]))
                if not want <= got:
                    fail("recording rule %s: series for ranks %s, want %s" %
                         (rule["name"], sorted(x for x in got if x), sorted(want)))
                got = ranks_of(query(base, rule["name"]))
                if not want <= got:
                    fail("recorded series %s: ranks %s, want %s" %
                         (rule["name"], sorted(x for x in got if x), sorted(want)))
        if nrules == 0:
            fail("Prometheus loaded no recording rule")
        # the hit rates are ratios, and the build says which rank it is
        for name in ("adaptalloc:small_hit_ratio:rate5m", "adaptalloc:overall_hit_ratio:rate5m"):
            for s in query(base, name):
                v = float(s["value"][1])
                if not 0.0 <= v <= 1.0:
                    fail("%s = %s is not a ratio (%s)" % (name, v, s["metric"]))
        info = query(base, "adaptalloc_build_info")
        if {s["metric"].get("rank") for s in info} != want:
            fail("adaptalloc_build_info does not carry each process's RANK: %s" % info)
        info = query(base, "adaptalloc_info")
        if not all(s["metric"].get("host") for s in info) or ranks_of(info) != want:
            fail("adaptalloc_info does not carry each process's rank and host: %s" % info)
        # no GPU: no device series at all (clearly host-only)
        dev = query(base, '{__name__=~"adaptalloc_device_.*"}')
        if dev:
            fail("device series without a GPU: %s" % dev[:2])
        print("ok: %d dashboard queries and %d recording rules returned series for ranks %s"
              % (checked, nrules, ", ".join(sorted(want))))
        return 0
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


if __name__ == "__main__":
    sys.exit(main())
