#!/usr/bin/env python3
"""Render a Grafana dashboard JSON into a static HTML page from real data.

No Grafana server is packaged for Debian 12, so this draws what Grafana would
draw from the same file: it reads the dashboard JSON, resolves its template
variables against a Prometheus (label_values(...) through the HTTP API, every
value picked: the dashboard's "All"), runs every panel's PromQL query over a
time range through /api/v1/query_range (with $__interval, $__rate_interval,
$__range and the variables interpolated as Grafana's Prometheus data source
does), and lays the panels out on Grafana's 24-column grid (gridPos) with
their titles, types, units and legends. Charts are inline SVG; the page needs
nothing from the network. tools/grafana-screenshot.sh runs it against two demo
ranks and photographs the page with headless chromium (docs/img/grafana.png).

It is a preview, not Grafana: panel types timeseries, stat, gauge, bargauge,
table, heatmap (Prometheus buckets: format "heatmap", one row per le), text
and row are drawn (in Grafana's dark theme and classic palette); any other
type is drawn as a box naming the type and reported as unsupported.

    python3 tools/grafana_preview.py --prometheus http://127.0.0.1:9090 \\
        --dashboard examples/grafana/adaptalloc.json --out grafana.html \\
        [--from now-5m] [--to now] [--var rank=0] [--report report.json] \\
        [--expect rank=0,1]

--report writes what each panel got (per query: the interpolated expression,
its series, their legends and label values) as JSON. --expect LABEL=V1,V2
fails (exit 1) when a panel query whose series carry LABEL returned none with
one of the values (a query summed over LABEL, or with no series at all, is not
held to it: the caller checks those). Exit 0 done, 1 a query or an expectation failed, 2 bad input
or output: an unreadable dashboard (not UTF-8, not JSON, over 64 MiB, of the
wrong shape: a list where an object belongs, a panel that is not an object
(in a row's panels too), a panel without gridPos, a panel taller than 500
grid rows, a min or max beyond 1e300), a Prometheus sample beyond 1e300 (no
axis can span it), a time bound that is not a finite time, an
output that is the dashboard (or a link to it) or cannot be written. Every
problem is one line naming the file or option; arguments and outputs are
checked before any query, and the page and the report are written whole or
not at all (through temporaries renamed into place:
python/adaptalloc/_outfile.py, the rule every program of the project follows).
"""
import argparse
import datetime
import html
import json
import math
import os
import re
import sys
import urllib.error
import urllib.parse
import urllib.request

GRID_COLUMNS = 24
MAX_GRID_ROWS = 500  # a panel's gridPos h and the page's bottom, in grid rows
DASHBOARD_MAX_BYTES = 64 << 20
ANSWER_MAX_BYTES = 256 << 20  # one Prometheus answer
MAX_DRAWN = 1e300  # the largest magnitude an axis can span (-1e308..1e308 overflows)
LATEST_TIME = 253402300799.0  # 9999-12-31T23:59:59Z, the last time a page can show
GRID_CELL_HEIGHT = 30  # Grafana's react-grid-layout row height, px
GRID_MARGIN = 8  # between panels, px
PAGE_WIDTH = 1440
PAGE_PADDING = 16
# Grafana's "palette-classic" (the timeseries default colour mode)
PALETTE = ["#7EB26D", "#EAB839", "#6ED0E0", "#EF843C", "#E24D42", "#1F78C1", "#BA43A6",
           "#705DA0", "#508642", "#CCA300", "#447EBC", "#C15C17", "#890F02", "#0A437C",
           "#6D1F62", "#584477", "#B7DBAB", "#F4D598", "#70DBED", "#F9BA8F"]
DRAWN_TYPES = ("timeseries", "graph", "stat", "gauge", "bargauge", "table", "heatmap", "text",
               "row")


def _outfile():
    """adaptalloc's one rule for outputs and bounded inputs
    (python/adaptalloc/_outfile.py), loaded by its path: the tool needs no
    installed package."""
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "python",
                        "adaptalloc", "_outfile.py")
    spec = importlib.util.spec_from_file_location("aa_outfile", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


outfile = _outfile()


class InputError(Exception):
    """Bad input: the dashboard, an option or the Prometheus address."""


class QueryError(Exception):
    """Prometheus refused or failed a query."""


# ---------------------------------------------------------------- durations

def parse_duration(text):
    """'90s', '5m', '1h30m', '250ms' -> seconds (float). Raises InputError."""
    m = re.fullmatch(r"((\d+)d)?((\d+)h)?((\d+)m(?!s))?((\d+)s)?((\d+)ms)?", text or "")
    if not m or not text:
        raise InputError("not a duration: %r (want e.g. 30s, 5m, 1h)" % text)
    d, h, mi, s, ms = (int(m.group(i) or 0) for i in (2, 4, 6, 8, 10))
    return d * 86400 + h * 3600 + mi * 60 + s + ms / 1000.0


def format_duration(seconds):
    """Seconds -> Prometheus duration text ('1m30s', '15s', '500ms')."""
    ms = int(round(seconds * 1000))
    if ms % 1000:
        return "%dms" % ms
    s = ms // 1000
    out = ""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if s >= size:
            out += "%d%s" % (s // size, unit)
            s %= size
    return out or "0s"


def parse_time(text, now):
    """Grafana's 'now', 'now-5m' or an epoch in seconds -> epoch seconds."""
    if text == "now":
        return now
    m = re.fullmatch(r"now-(.+)", text)
    if m:
        t = now - parse_duration(m.group(1))
        if t < 0:
            raise InputError("time %r is before 1970" % text)
        return t
    try:
        t = outfile.finite(text, "time")
    except ValueError:
        raise InputError("not a time: %r (want now, now-5m or epoch seconds)" % text)
    if not 0 <= t <= LATEST_TIME:
        raise InputError("time %r is outside 1970 to 9999 (epoch seconds)" % text)
    return t


def round_interval(seconds):
    """Grafana's rangeutil.roundInterval: the calculated $__interval."""
    ms = seconds * 1000
    table = ((10, 1), (15, 10), (35, 20), (75, 50), (150, 100), (350, 200), (750, 500),
             (1500, 1000), (3500, 2000), (7500, 5000), (12500, 10000), (17500, 15000),
             (25000, 20000), (45000, 30000), (90000, 60000), (210000, 120000),
             (450000, 300000), (750000, 600000), (1050000, 900000), (1500000, 1200000),
             (2700000, 1800000), (5400000, 3600000), (9000000, 7200000),
             (16200000, 10800000), (24300000, 21600000), (64800000, 43200000),
             (129600000, 86400000))
    for limit, value in table:
        if ms <= limit:
            return value / 1000.0
    return 604800.0


def relative_label(frm, to):
    m = re.fullmatch(r"now-(\d+)([smhd])", frm)
    if m and to == "now":
        words = {"s": "second", "m": "minute", "h": "hour", "d": "day"}
        n = int(m.group(1))
        return "Last %d %s%s" % (n, words[m.group(2)], "" if n == 1 else "s")
    return "%s to %s" % (frm, to)


# ---------------------------------------------------------------- units

def decimals_for(value):
    """Grafana's getDecimalsForValue (auto decimals of a displayed value)."""
    if value == 0 or not math.isfinite(value):
        return 0
    if value % 1 == 0:
        return 0
    log10 = math.floor(math.log10(abs(value)))
    dec = -log10 + 1
    norm = value / 10 ** (-dec)
    if norm > 2.25:
        dec += 1
    return max(0, dec)


def fixed(value, decimals):
    if decimals is None:
        value = float("%.12g" % value)  # 3.0000000000000004e-05 s is 30 µs
        decimals = decimals_for(value)
    return "%.*f" % (min(decimals, 6), value)


def scaled(value, factor, suffixes, decimals, sep=" "):
    if value == 0 or not math.isfinite(value):
        return fixed(value, decimals) + (sep + suffixes[0] if suffixes[0] else "")
    i = 0
    v = value
    while abs(v) >= factor and i < len(suffixes) - 1:
        v /= factor
        i += 1
    text = fixed(v, decimals)
    return text + (sep + suffixes[i] if suffixes[i] else "")


def format_value(value, unit, decimals=None):
    """A value as Grafana's unit formatter writes it (the units dashboards use)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "No data"
    if unit in ("bytes",):
        return scaled(value, 1024, ["B", "KiB", "MiB", "GiB", "TiB", "PiB"], decimals)
    if unit in ("decbytes",):
        return scaled(value, 1000, ["B", "kB", "MB", "GB", "TB", "PB"], decimals)
    if unit == "percentunit":
        return fixed(value * 100, decimals) + "%"
    if unit == "percent":
        return fixed(value, decimals) + "%"
    if unit in ("ops", "reqps", "rps", "wps", "iops", "cps", "opm"):
        name = {"ops": "ops/s", "reqps": "req/s", "rps": "rd/s", "wps": "wr/s",
                "iops": "io/s", "cps": "c/s", "opm": "ops/min"}[unit]
        return scaled(value, 1000, ["", "K", "M", "B", "T"], decimals, "") + " " + name
    if unit in ("short", "", None):
        return scaled(value, 1000, ["", "K", "Mil", "Bil", "Tri"], decimals)
    if unit == "none":
        return fixed(value, decimals)
    if unit in ("s", "ms", "µs", "ns"):
        sec = value * {"s": 1, "ms": 1e-3, "µs": 1e-6, "ns": 1e-9}[unit]
        a = abs(sec)
        if a == 0:
            return "0 s"
        for limit, mult, name in ((1e-6, 1e9, "ns"), (1e-3, 1e6, "µs"), (1, 1e3, "ms"),
                                  (60, 1, "s"), (3600, 1 / 60, "min"), (86400, 1 / 3600, "hour")):
            if a < limit:
                return fixed(sec * mult, decimals) + " " + name
        return fixed(sec / 86400, decimals) + " day"
    if unit == "dateTimeAsIso":
        t = datetime.datetime.fromtimestamp(value / 1000.0, datetime.timezone.utc)
        return t.strftime("%Y-%m-%d %H:%M:%S")
    # Grafana shows an unknown unit as a custom suffix
    return fixed(value, decimals) + " " + str(unit)


KNOWN_UNITS = ("bytes", "decbytes", "percentunit", "percent", "ops", "reqps", "rps", "wps",
               "iops", "cps", "opm", "short", "none", "s", "ms", "µs", "ns", "dateTimeAsIso", "")


# ---------------------------------------------------------------- Prometheus

class Prometheus:
    def __init__(self, base, timeout=10):
        self.base = base.rstrip("/")
        self.timeout = timeout

    def get(self, path, params):
        url = self.base + path + "?" + urllib.parse.urlencode(params, doseq=True)
        try:
            with urllib.request.urlopen(url, timeout=self.timeout) as r:
                body = r.read(ANSWER_MAX_BYTES + 1)
        except urllib.error.HTTPError as e:
            body = e.read(4096).decode(errors="replace")[:300]
            raise QueryError("%s refused (%d): %s" % (path, e.code, " ".join(body.split())))
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise QueryError("cannot reach Prometheus at %s: %s" % (self.base, e))
        if len(body) > ANSWER_MAX_BYTES:
            raise QueryError("%s: Prometheus's answer is over %d bytes" % (path, ANSWER_MAX_BYTES))
        try:
            doc = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            raise QueryError("%s: the answer from %s is not JSON (%r...): is it Prometheus?"
                             % (path, self.base, body[:40].decode(errors="replace")))
        if not isinstance(doc, dict):
            raise QueryError("%s: the answer from %s is %s, not an object"
                             % (path, self.base, outfile.json_kind(doc)))
        if doc.get("status") != "success":
            raise QueryError("%s failed: %s" % (path, str(doc.get("error", doc))[:300]))
        if "data" not in doc:
            raise QueryError("%s: the answer from %s has no \"data\"" % (path, self.base))
        return doc["data"]

    def scrape_interval(self):
        cfg = self.get("/api/v1/status/config", {})
        cfg = cfg.get("yaml") if isinstance(cfg, dict) else None
        if not isinstance(cfg, str):
            raise QueryError("/api/v1/status/config: the answer has no \"yaml\" text")
        m = re.search(r"^global:\n(?:  .*\n)*?  scrape_interval: (\S+)", cfg, re.M)
        return parse_duration(m.group(1)) if m else 15.0


def label_values_query(q):
    """label_values(metric{...}, label) / label_values(label) -> (match, label)."""
    m = re.fullmatch(r"\s*label_values\((?:(.+),\s*)?(\w+)\s*\)\s*", q)
    if not m:
        raise InputError("variable query %r: only label_values(...) is resolved" % q)
    return m.group(1), m.group(2)


# ---------------------------------------------------------------- variables

def interpolate(text, values, builtins):
    """Grafana's interpolation for a Prometheus query: $var, ${var}, [[var]];
    a multi-value or All variable becomes its regex (allValue, or (a|b))."""
    def sub(m):
        name = m.group(1) or m.group(2) or m.group(3)
        if name in builtins:
            return builtins[name]
        if name in values:
            return values[name]["regex"]
        return m.group(0)
    return re.sub(r"\$\{(\w+)(?::\w+)?\}|\[\[(\w+)\]\]|\$(\w+)", sub, text)


def regex_escape(v):
    return re.sub(r"([\\^$.|?*+()\[\]{}])", r"\\\1", v)


def resolve_variables(dash, prom, start, end, overrides):
    """Every template variable's values, in order (later ones use earlier)."""
    values = {}
    for var in dash.get("templating", {}).get("list", []):
        name, kind = var.get("name"), var.get("type")
        if not name:
            raise InputError("a template variable has no name")
        if kind == "datasource":
            values[name] = {"label": var.get("label") or name, "shown": ["Prometheus"],
                            "regex": "prometheus", "hide": var.get("hide", 0)}
            continue
        if kind == "query":
            q = var.get("query")
            q = q.get("query") if isinstance(q, dict) else q
            match, label = label_values_query(interpolate(q or "", values, {}))
            params = {"start": "%.3f" % start, "end": "%.3f" % end}
            if match:
                params["match[]"] = match
            found = prom.get("/api/v1/label/%s/values" % label, params)
            if not isinstance(found, list) or not all(isinstance(v, str) for v in found):
                raise QueryError("/api/v1/label/%s/values: the answer's data is not a list of "
                                 "strings" % label)
            found = sorted(set(found))
        elif not isinstance(var.get("query") or "", str):
            raise InputError("template variable %r: a %s variable's query is a string"
                             % (name, kind))
        elif kind == "custom":
            found = [v.strip() for v in (var.get("query") or "").split(",") if v.strip()]
        elif kind in ("constant", "textbox"):
            found = [var.get("query") or ""]
        elif kind == "interval":
            found = [v.strip() for v in (var.get("query") or "").split(",") if v.strip()][:1]
        else:
            raise InputError("template variable %r: type %r is not resolved by the preview"
                             % (name, kind))
        if name in overrides:
            picked = overrides.pop(name)
            unknown = [v for v in picked if v not in found]
            if unknown:
                raise InputError("--var %s: %s not among its values %s"
                                 % (name, ", ".join(unknown), found))
            shown = picked
            regex = regex_escape(picked[0]) if len(picked) == 1 else \
                "(" + "|".join(regex_escape(v) for v in picked) + ")"
        elif var.get("includeAll") and (var.get("current") or {}).get("value") in \
                ("$__all", ["$__all"]):
            shown = ["All"]
            regex = var.get("allValue") or \
                "(" + "|".join(regex_escape(v) for v in found) + ")"
        else:
            cur = (var.get("current") or {}).get("value")
            shown = [cur] if isinstance(cur, str) and cur else found[:1]
            regex = shown[0] if shown else ""
        values[name] = {"label": var.get("label") or name, "shown": shown, "found": found,
                        "regex": regex, "hide": var.get("hide", 0)}
    if overrides:
        raise InputError("--var: no template variable %s" % ", ".join(sorted(overrides)))
    return values


# ---------------------------------------------------------------- queries

def legend_of(series, fmt):
    metric = series["metric"]
    if fmt and fmt != "__auto":
        return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: metric.get(m.group(1), ""), fmt).strip()
    name = metric.get("__name__", "")
    labels = ", ".join('%s="%s"' % (k, v) for k, v in sorted(metric.items()) if k != "__name__")
    return "%s{%s}" % (name, labels) if labels else (name or "{}")


def panel_width_px(gp, inner):
    col = (inner - (GRID_COLUMNS - 1) * GRID_MARGIN) / GRID_COLUMNS
    return gp["w"] * col + (gp["w"] - 1) * GRID_MARGIN


def run_panel(panel, prom, values, start, end, scrape_s, inner):
    """Every target of one panel over the range -> list of query results."""
    width = max(1, int(panel_width_px(panel["gridPos"], inner)))
    interval = max(scrape_s, round_interval((end - start) / width))
    if panel.get("interval"):
        interval = max(interval, parse_duration(panel["interval"].lstrip("<>=")))
    rate_interval = max(interval + scrape_s, 4 * scrape_s)
    rng = end - start
    builtins = {"__interval": format_duration(interval),
                "__interval_ms": str(int(interval * 1000)),
                "__rate_interval": format_duration(rate_interval),
                "__range": format_duration(rng), "__range_s": str(int(rng)),
                "__range_ms": str(int(rng * 1000))}
    # the Prometheus data source aligns the range to the step
    a_start = math.floor(start / interval) * interval
    a_end = math.ceil(end / interval) * interval
    out = []
    for t in panel.get("targets", []):
        if t.get("hide"):
            continue
        expr = interpolate(t.get("expr", ""), values, builtins)
        if not expr.strip():
            raise InputError("panel %r target %s has no expr" % (panel.get("title"),
                                                                  t.get("refId")))
        if "$" in re.sub(r"\$\d", "", expr):
            raise InputError("panel %r: a variable the preview cannot resolve in %s"
                             % (panel.get("title"), expr))
        res = {"refId": t.get("refId"), "expr": expr, "series": [], "error": None,
               "step": interval}
        try:
            if t.get("instant") or t.get("format") == "table" and not t.get("range"):
                data = prom.get("/api/v1/query", {"query": expr, "time": "%.3f" % end})
                path = "/api/v1/query"
            else:
                data = prom.get("/api/v1/query_range", {
                    "query": expr, "start": "%.3f" % a_start, "end": "%.3f" % a_end,
                    "step": format_duration(interval)})
                path = "/api/v1/query_range"
            res["series"] = answer_series(path, data, t.get("legendFormat"))
        except QueryError as e:
            res["error"] = str(e)
        out.append(res)
    return out


def answer_series(path, data, legend_format):
    """A query's answer (its "data") -> [{metric, legend, points}]; QueryError
    naming the query path when it is not the shape Prometheus answers with."""
    try:
        kind, result = data["resultType"], data["result"]
        if not isinstance(result, list):
            raise TypeError("result is not a list")
        if path == "/api/v1/query":
            rows = [{"metric": s["metric"], "values": [s["value"]]}
                    for s in result] if kind == "vector" else []
        else:
            rows = result
        out = []
        for s in rows:
            metric = s["metric"]
            if not isinstance(metric, dict) or \
                    not all(isinstance(v, str) for v in metric.values()):
                raise TypeError("a series' metric is not an object of strings")
            pts = [(float(ts), float(v)) for ts, v in s["values"]]
            if not all(math.isfinite(ts) and 0 <= ts <= LATEST_TIME for ts, _ in pts):
                raise ValueError("a sample's time is not a time")
            big = next((v for _, v in pts if math.isfinite(v) and abs(v) > MAX_DRAWN), None)
            if big is not None:
                raise InputError("%s: a sample of %r is beyond what a panel can draw "
                                 "(magnitude at most %g): refused" % (path, big, MAX_DRAWN))
            out.append({"metric": metric, "legend": legend_of(s, legend_format),
                        "points": pts})
        return out
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
        raise QueryError("%s: the answer's data is not the shape Prometheus answers with (%s)"
                         % (path, e))


# ---------------------------------------------------------------- drawing

def nice_step(span, count):
    raw = span / max(1, count)
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def axis_ticks(lo, hi, count, unit):
    if unit == "bytes" and hi - lo >= 1024:
        # Grafana steps byte axes in powers of two of the shown unit
        p = 1024 ** max(0, int(math.log(max(abs(hi), abs(lo), 1), 1024)))
        step = nice_step((hi - lo) / p, count) * p
    else:
        step = nice_step(hi - lo, count)
    first = math.floor(lo / step) * step
    ticks = []
    v = first
    while v <= hi + step * 1e-9:
        if v >= lo - step * 1e-9:
            ticks.append(v)
        v += step
    return ticks, step


def tick_decimals(ticks, step, unit):
    """Decimals for axis labels: enough for the step in the unit the largest
    tick is shown in (150 µs, 2.5 MiB), as Grafana's axes do."""
    top = max(abs(t) for t in ticks)
    if top == 0 or step <= 0:
        return 0
    m = re.match(r"-?[0-9.]+", format_value(top, unit, 6))
    if not m or float(m.group(0)) == 0:
        return 0
    shown_step = step * float(m.group(0)) / top
    dec = max(0, -int(math.floor(math.log10(shown_step) + 1e-9)))
    if dec and abs(round(shown_step * 10 ** dec) - shown_step * 10 ** dec) > 1e-6:
        dec += 1  # 2.5, 0.25
    return min(dec, 4)


def color_of(i):
    return PALETTE[i % len(PALETTE)]


def draw_timeseries(panel, results, w, h, start, end, unit, decimals):
    series = [s for r in results for s in r["series"]]
    legend = panel.get("options", {}).get("legend", {})
    show_legend = legend.get("showLegend", True) and legend.get("displayMode") != "hidden"
    legend_h = 0
    legend_html = ""
    if show_legend and series:
        items = []
        for i, s in enumerate(series):
            items.append('<span class="legend-item" data-legend="%s"><i style="background:%s">'
                         '</i>%s</span>' % (html.escape(s["legend"], quote=True),
                                            color_of(i), html.escape(s["legend"])))
        legend_html = '<div class="legend">%s</div>' % "".join(items)
        per_line = max(1, int(w // 190))
        legend_h = min(h * 0.45, 18 * math.ceil(len(series) / per_line) + 6)
    ch = h - legend_h
    if not series:
        return '<div class="nodata" style="height:%dpx">No data</div>' % h
    vals = [v for s in series for _, v in s["points"] if math.isfinite(v)]
    lo, hi = min(vals + [0.0]), max(vals + [0.0])
    fc = panel.get("fieldConfig", {}).get("defaults", {})
    if fc.get("min") is not None:
        lo = fc["min"]
    if fc.get("max") is not None:
        hi = fc["max"]
    if hi == lo:
        hi = lo + (abs(lo) if lo else 1)
    ticks, step = axis_ticks(lo, hi, max(2, int(ch // 40)), unit)
    lo, hi = min(lo, ticks[0]), max(hi, ticks[-1])
    if decimals is not None:
        tdec = decimals
    elif unit in ("s", "ms", "µs", "ns"):
        tdec = None  # ticks cross units (50 s, 1.25 min): each its own decimals
    else:
        tdec = tick_decimals(ticks, step, unit)
    labels = [format_value(t, unit, tdec) for t in ticks]
    left = 10 + 6.2 * max(len(x) for x in labels)
    right, top, bottom = 8, 6, 20
    pw, ph = max(10, w - left - right), max(10, ch - top - bottom)

    def X(t):
        return left + (t - start) / (end - start) * pw

    def Y(v):
        return top + (hi - v) / (hi - lo) * ph
    parts = ['<svg class="chart" width="%d" height="%d" viewBox="0 0 %d %d">'
             % (w, ch, w, ch)]
    for t, lab in zip(ticks, labels):
        y = Y(t)
        parts.append('<line class="grid" x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f"/>'
                     % (left, left + pw, y, y))
        parts.append('<text class="tick" x="%.1f" y="%.1f" text-anchor="end">%s</text>'
                     % (left - 6, y + 4, html.escape(lab)))
    span = end - start
    tstep = next((s for s in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600,
                              7200, 10800, 21600, 43200, 86400) if span / s <= pw / 90), 86400)
    t = math.ceil(start / tstep) * tstep
    fmt = "%H:%M:%S" if tstep < 60 else "%H:%M"
    while t <= end:
        x = X(t)
        parts.append('<line class="grid" x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f"/>'
                     % (x, x, top, top + ph))
        lab = datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime(fmt)
        parts.append('<text class="tick" x="%.1f" y="%.1f" text-anchor="middle">%s</text>'
                     % (x, top + ph + 14, lab))
        t += tstep
    for i, s in enumerate(series):
        pts = [(X(ts), Y(v)) for ts, v in s["points"] if start <= ts <= end
               and math.isfinite(v)]
        if not pts:
            continue
        # a gap where a sample is missing for more than two steps, as Grafana breaks lines
        d, prev = [], None
        stp = results[0]["step"] if results else 1
        for (ts, v), (x, y) in zip([p for p in s["points"] if start <= p[0] <= end
                                    and math.isfinite(p[1])], pts):
            cmd = "L" if prev is not None and ts - prev <= 2 * stp + 1e-6 else "M"
            d.append("%s%.1f,%.1f" % (cmd, x, y))
            prev = ts
        parts.append('<path class="line" d="%s" stroke="%s"/>' % (" ".join(d), color_of(i)))
        if len(pts) <= 3:
            for x, y in pts:
                parts.append('<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s"/>'
                             % (x, y, color_of(i)))
    parts.append("</svg>")
    return "".join(parts) + legend_html


def reduce_last(points):
    fin = [v for _, v in points if math.isfinite(v)]
    return fin[-1] if fin else None


def threshold_color(panel, value):
    steps = (panel.get("fieldConfig", {}).get("defaults", {}).get("thresholds") or {}) \
        .get("steps") or [{"color": "green", "value": None}, {"color": "red", "value": 80}]
    color = steps[0].get("color", "green")
    for st in steps[1:]:
        if value is not None and st.get("value") is not None and value >= st["value"]:
            color = st.get("color", color)
    named = {"green": "#73BF69", "red": "#F2495C", "yellow": "#FADE2A", "orange": "#FF9830",
             "blue": "#5794F2", "purple": "#B877D9", "text": "#CCCCDC"}
    return named.get(color, color)


def draw_values(panel, results, w, h, unit, decimals, kind):
    series = [s for r in results for s in r["series"]]
    if not series:
        return '<div class="nodata" style="height:%dpx">No data</div>' % h
    n = len(series)
    cols = max(1, min(n, int(w // 150)))
    rows = math.ceil(n / cols)
    cw, rh = w / cols, h / rows
    out = ['<svg class="chart" width="%d" height="%d">' % (w, h)]
    fc = panel.get("fieldConfig", {}).get("defaults", {})
    mn, mx = fc.get("min", 0), fc.get("max", 1 if unit == "percentunit" else 100)
    for i, s in enumerate(series):
        v = reduce_last(s["points"])
        x0, y0 = (i % cols) * cw, (i // cols) * rh
        col = threshold_color(panel, v)
        text = html.escape(format_value(v, unit, decimals))
        fs = max(10, min(rh * 0.35, cw / max(4, len(text)) * 1.6))
        if kind == "gauge":
            r = min(cw, rh * 1.6) * 0.38
            cx, cy = x0 + cw / 2, y0 + rh * 0.62
            frac = 0 if v is None or mx == mn else max(0.0, min(1.0, (v - mn) / (mx - mn)))

            def arc(f0, f1):
                a0, a1 = math.pi * (1 + f0), math.pi * (1 + f1)
                return "M%.1f,%.1f A%.1f,%.1f 0 0 1 %.1f,%.1f" % (
                    cx + r * math.cos(a0), cy + r * math.sin(a0), r, r,
                    cx + r * math.cos(a1), cy + r * math.sin(a1))
            out.append('<path d="%s" stroke="#2c3235" stroke-width="%d" fill="none"/>'
                       % (arc(0, 1), r * 0.2))
            if frac > 0:
                out.append('<path d="%s" stroke="%s" stroke-width="%d" fill="none"/>'
                           % (arc(0, frac), col, r * 0.2))
            out.append('<text class="big" x="%.1f" y="%.1f" fill="%s" font-size="%.0f" '
                       'text-anchor="middle">%s</text>' % (cx, cy, col, fs * 0.8, text))
            out.append('<text class="tick" x="%.1f" y="%.1f" text-anchor="middle">%s</text>'
                       % (cx, y0 + rh - 4, html.escape(s["legend"])))
        elif kind == "bargauge":
            frac = 0 if v is None or mx == mn else max(0.0, min(1.0, (v - mn) / (mx - mn)))
            bw = cw - 120
            out.append('<text class="tick" x="%.1f" y="%.1f">%s</text>'
                       % (x0 + 4, y0 + 14, html.escape(s["legend"])))
            out.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#2c3235"/>'
                       % (x0 + 4, y0 + 20, bw, rh - 26))
            out.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>'
                       % (x0 + 4, y0 + 20, bw * frac, rh - 26, col))
            out.append('<text class="big" x="%.1f" y="%.1f" fill="%s" font-size="16">%s</text>'
                       % (x0 + bw + 10, y0 + rh / 2 + 10, col, text))
        else:  # stat
            out.append('<text class="big" x="%.1f" y="%.1f" fill="%s" font-size="%.0f" '
                       'text-anchor="middle">%s</text>'
                       % (x0 + cw / 2, y0 + rh / 2 + fs / 3, col, fs, text))
            if n > 1:
                out.append('<text class="tick" x="%.1f" y="%.1f" text-anchor="middle">%s'
                           '</text>' % (x0 + cw / 2, y0 + rh / 2 - fs * 0.7,
                                        html.escape(s["legend"])))
    out.append("</svg>")
    return "".join(out)


def le_value(series):
    """A bucket series' upper bound (its le label, or its legend), +Inf last."""
    v = series["metric"].get("le", series["legend"])
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.inf


def draw_heatmap(panel, results, w, h, start, end):
    """Prometheus buckets as Grafana draws format "heatmap": the series sorted
    by le, each cumulative count less the one below it, one row per bucket,
    one column per step; colour by the square root of the value (the
    "Oranges" scheme, exponent 0.5). The y axis names each row's upper bound
    in the panel's options.yAxis.unit."""
    series = sorted((s for r in results for s in r["series"]), key=le_value)
    if not series:
        return '<div class="nodata" style="height:%dpx">No data</div>' % h
    times = sorted({t for s in series for t, _ in s["points"]})
    if not times:
        return '<div class="nodata" style="height:%dpx">No data</div>' % h
    col_of = {t: i for i, t in enumerate(times)}
    grid = [[0.0] * len(times) for _ in series]
    for r, s in enumerate(series):
        for t, v in s["points"]:
            if math.isfinite(v):
                grid[r][col_of[t]] = v
    for r in range(len(series) - 1, 0, -1):  # cumulative -> per bucket
        for c in range(len(times)):
            grid[r][c] = max(0.0, grid[r][c] - grid[r - 1][c])
    top = max((v for row in grid for v in row), default=0.0)
    yunit = (panel.get("options", {}).get("yAxis") or {}).get("unit", "")
    left, bottom = 70, 18
    pw, ph = max(1.0, w - left - 6), max(1.0, h - bottom - 4)
    cw, rh = pw / len(times), ph / len(series)
    out = ['<svg class="chart heatmap" width="%d" height="%d">' % (w, h)]
    for r, s in enumerate(series):
        y = 4 + ph - (r + 1) * rh
        for c in range(len(times)):
            v = grid[r][c]
            if v <= 0 or top <= 0:
                continue
            f = math.sqrt(v / top)
            out.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="rgb(%d,%d,%d)"/>'
                       % (left + c * cw, y, max(0.5, cw - 1), max(0.5, rh - 1),
                          int(60 + 195 * f), int(30 + 110 * f), int(10 + 10 * f)))
        le = le_value(s)
        name = "+Inf" if math.isinf(le) else format_value(le, yunit, 0)
        if len(series) <= 24 or r % math.ceil(len(series) / 24) == 0:
            out.append('<text class="tick" x="%d" y="%.1f" text-anchor="end">%s</text>'
                       % (left - 4, y + rh / 2 + 4, html.escape(name)))
    for t in (times[0], times[-1]):
        x = left + (col_of[t] + 0.5) * cw
        out.append('<text class="tick" x="%.1f" y="%d" text-anchor="middle">%s</text>'
                   % (x, h - 4, datetime.datetime.fromtimestamp(
                       t, datetime.timezone.utc).strftime("%H:%M:%S")))
    out.append("</svg>")
    return "".join(out)


def draw_table(panel, results, w, h, unit, decimals):
    series = [s for r in results for s in r["series"]]
    if not series:
        return '<div class="nodata" style="height:%dpx">No data</div>' % h
    keys = sorted({k for s in series for k in s["metric"] if k != "__name__"})
    head = "".join("<th>%s</th>" % html.escape(k) for k in keys) + "<th>Value</th>"
    body = []
    for s in series:
        cells = "".join("<td>%s</td>" % html.escape(s["metric"].get(k, "")) for k in keys)
        body.append("<tr>%s<td>%s</td></tr>" % (
            cells, html.escape(format_value(reduce_last(s["points"]), unit, decimals))))
    return ('<div class="table" style="height:%dpx"><table><thead><tr>%s</tr></thead>'
            '<tbody>%s</tbody></table></div>' % (h, head, "".join(body)))


CSS = """
body{margin:0;background:#111217;color:#ccccdc;font:13px Inter,'Helvetica Neue',Arial,sans-serif}
header{padding:10px 16px 6px;border-bottom:1px solid #2c3235}
header h1{font-size:18px;font-weight:500;margin:0 0 8px;color:#d8d9da}
header .range{float:right;border:1px solid #2c3235;padding:4px 10px;border-radius:2px}
.vars{display:flex;gap:8px;flex-wrap:wrap}
.var{display:flex;border:1px solid #2c3235;border-radius:2px}
.var b{background:#22252b;padding:4px 8px;font-weight:500;color:#6e9fff}
.var span{padding:4px 8px}
.grid{position:relative;margin:16px}
.panel{position:absolute;background:#181b1f;border:1px solid #24292e;border-radius:2px;
  box-sizing:border-box;overflow:hidden}
.panel h2{font-size:14px;font-weight:500;margin:0;padding:6px 8px;height:20px;color:#ccccdc;
  white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.row-panel{position:absolute;font-size:16px;font-weight:500;color:#d8d9da}
.row-panel h2{font-size:16px;margin:4px 0}
.chart line.grid{stroke:#2c3235;stroke-width:1}
.chart text.tick{fill:#9fa7b3;font-size:11px}
.chart path.line{fill:none;stroke-width:1.2}
.chart text.big{font-weight:500}
.legend{padding:2px 8px;font-size:12px;line-height:18px;overflow:hidden}
.legend-item{display:inline-block;margin-right:14px;white-space:nowrap}
.legend-item i{display:inline-block;width:14px;height:4px;margin:0 6px 3px 0;border-radius:1px}
.nodata{display:flex;align-items:center;justify-content:center;color:#9fa7b3;font-size:16px}
.unsupported{color:#f2495c}
.table{overflow:auto}
.table table{border-collapse:collapse;width:100%}
.table th,.table td{border-bottom:1px solid #2c3235;padding:3px 6px;text-align:left}
footer{margin:0 16px 12px;color:#9fa7b3;font-size:12px}
"""


def render(dash, source, values, panels_out, start, end, frm, to, scrape_s):
    inner = PAGE_WIDTH - 2 * PAGE_PADDING
    col = (inner - (GRID_COLUMNS - 1) * GRID_MARGIN) / GRID_COLUMNS
    body, bottom = [], 0
    for p, results in panels_out:
        gp = p["gridPos"]
        x = gp["x"] * (col + GRID_MARGIN)
        y = gp["y"] * (GRID_CELL_HEIGHT + GRID_MARGIN)
        w = panel_width_px(gp, inner)
        h = gp["h"] * GRID_CELL_HEIGHT + (gp["h"] - 1) * GRID_MARGIN
        bottom = max(bottom, y + h)
        title = p.get("title", "")
        kind = p.get("type", "")
        series = [s for r in results for s in r["series"]]
        attrs = ('data-panel-id="%s" data-panel-type="%s" data-title="%s" data-series="%d"'
                 % (p.get("id", ""), html.escape(kind, quote=True),
                    html.escape(title, quote=True), len(series)))
        style = "left:%.1fpx;top:%.1fpx;width:%.1fpx;height:%.1fpx" % (x, y, w, h)
        if kind == "row":
            body.append('<div class="row-panel" %s style="%s"><h2 class="panel-title">'
                        '&#8964; %s</h2></div>' % (attrs, style, html.escape(title)))
            continue
        fc = p.get("fieldConfig", {}).get("defaults", {})
        unit, decimals = fc.get("unit", ""), fc.get("decimals")
        ih = h - 34
        iw = w - 2
        if kind in ("timeseries", "graph"):
            inner_html = draw_timeseries(p, results, iw, ih, start, end, unit, decimals)
        elif kind in ("stat", "gauge", "bargauge"):
            inner_html = draw_values(p, results, iw, ih, unit, decimals, kind)
        elif kind == "table":
            inner_html = draw_table(p, results, iw, ih, unit, decimals)
        elif kind == "heatmap":
            inner_html = draw_heatmap(p, results, iw, ih, start, end)
        elif kind == "text":
            inner_html = '<div class="legend"><pre>%s</pre></div>' % html.escape(
                p.get("options", {}).get("content", ""))
        else:
            inner_html = ('<div class="nodata unsupported" style="height:%dpx">panel type '
                          '%s is not drawn by the preview</div>' % (ih, html.escape(kind)))
        errors = [r["error"] for r in results if r["error"]]
        if errors:
            inner_html = '<div class="nodata unsupported" style="height:%dpx">%s</div>' % (
                ih, html.escape(errors[0][:200]))
        body.append('<div class="panel" %s style="%s"><h2 class="panel-title">%s</h2>%s</div>'
                    % (attrs, style, html.escape(title), inner_html))
    var_html = "".join(
        '<div class="var"><b>%s</b><span>%s</span></div>'
        % (html.escape(v["label"]), html.escape(" + ".join(v["shown"])))
        for v in values.values() if v.get("hide", 0) != 2)
    t0 = datetime.datetime.fromtimestamp(start, datetime.timezone.utc)
    t1 = datetime.datetime.fromtimestamp(end, datetime.timezone.utc)
    return """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>%(title)s (preview)</title>
<style>%(css)s</style></head>
<body data-dashboard-uid="%(uid)s" data-from="%(start).3f" data-to="%(end).3f">
<header><span class="range">&#128339; %(range)s (UTC %(t0)s to %(t1)s)</span>
<h1>%(title)s</h1><div class="vars">%(vars)s</div></header>
<div class="grid" style="height:%(height)dpx">%(body)s</div>
<footer>Rendered from the shipped dashboard JSON (%(source)s) by tools/grafana_preview.py: panel
layout, queries and units as Grafana would use them, data from a live Prometheus (scrape interval
%(scrape)s); not a Grafana screenshot.</footer>
</body></html>
""" % {"title": html.escape(dash.get("title", "")), "css": CSS,
       "uid": html.escape(str(dash.get("uid", "")), quote=True), "start": start, "end": end,
       "range": html.escape(relative_label(frm, to)), "t0": t0.strftime("%H:%M:%S"),
       "t1": t1.strftime("%H:%M:%S"), "vars": var_html, "height": bottom,
       "body": "\n".join(body), "source": html.escape(source),
       "scrape": format_duration(scrape_s)}


# ---------------------------------------------------------------- main

def _shape(cond, path, where, what):
    if not cond:
        raise InputError("%s: %s %s" % (path, where, what))


def _opt(obj, key, kinds):
    """obj[key] is absent, null or of one of kinds (a JSON boolean is not a
    number)."""
    v = obj.get(key)
    if v is None:
        return True
    if isinstance(v, bool):
        return bool in kinds
    return isinstance(v, kinds)


NUMBER = (int, float)


def check_panel(path, p, i):
    """Every field of a panel the preview reads is of the type it reads it as."""
    _shape(isinstance(p, dict), path, "panel %s" % i,
           "is %s, not an object" % outfile.json_kind(p))
    title = p.get("title")
    name = "panel %r" % (title if isinstance(title, str) else i)
    for key in ("title", "type", "interval", "description"):
        _shape(_opt(p, key, (str,)), path, name, "%s is not a string" % key)
    gp = p.get("gridPos")
    _shape(isinstance(gp, dict) and all(isinstance(gp.get(k), int) and
                                        not isinstance(gp.get(k), bool) for k in "xywh"),
           path, name, "has no gridPos {x, y, w, h}")
    _shape(gp["x"] >= 0 and gp["y"] >= 0 and gp["w"] >= 1 and gp["h"] >= 1 and
           gp["x"] + gp["w"] <= GRID_COLUMNS, path, name,
           "gridPos %s is off the 24-column grid" % gp)
    _shape(gp["h"] <= MAX_GRID_ROWS and gp["y"] + gp["h"] <= 20 * MAX_GRID_ROWS, path, name,
           "gridPos %s is taller than %d grid rows or lower than %d: refused"
           % (gp, MAX_GRID_ROWS, 20 * MAX_GRID_ROWS))
    if p.get("interval"):
        try:
            parse_duration(p["interval"].lstrip("<>="))
        except InputError as e:
            raise InputError("%s: %s interval: %s" % (path, name, e))
    targets = p.get("targets", [])
    _shape(isinstance(targets, list), path, name, "targets is not a list")
    for t in targets:
        _shape(isinstance(t, dict), path, name, "has a target that is not an object")
        for key in ("expr", "legendFormat", "refId", "format"):
            _shape(_opt(t, key, (str,)), path, name, "target %s is not a string" % key)
    fc = p.get("fieldConfig", {})
    _shape(isinstance(fc, dict) and isinstance(fc.get("defaults", {}), dict), path, name,
           "fieldConfig.defaults is not an object")
    d = fc.get("defaults", {})
    _shape(_opt(d, "unit", (str,)), path, name, "unit is not a string")
    _shape(_opt(d, "decimals", (int,)) and 0 <= (d.get("decimals") or 0) <= 20, path, name,
           "decimals is not a count from 0 to 20")
    for key in ("min", "max"):
        _shape(_opt(d, key, NUMBER), path, name, "%s is not a number" % key)
        _shape(d.get(key) is None or math.isfinite(d[key]), path, name,
               "%s is not finite" % key)
        _shape(d.get(key) is None or abs(d[key]) <= MAX_DRAWN, path, name,
               "%s %r is beyond what an axis can span (magnitude at most %g)"
               % (key, d.get(key), MAX_DRAWN))
    th = d.get("thresholds")
    _shape(th is None or isinstance(th, dict) and _opt(th, "steps", (list,)), path, name,
           "thresholds.steps is not a list")
    for st in (th or {}).get("steps") or []:
        _shape(isinstance(st, dict) and _opt(st, "color", (str,)) and
               _opt(st, "value", NUMBER), path, name,
               "a threshold step is not {color: string, value: number}")
    opts = p.get("options", {})
    _shape(isinstance(opts, dict) and _opt(opts, "content", (str,)) and
           _opt(opts, "legend", (dict,)), path, name,
           "options is not an object with a text content and a legend object")


def load_dashboard(path):
    try:
        dash = outfile.load_json(path, "--dashboard", DASHBOARD_MAX_BYTES, dict)
    except outfile.FileError as e:
        raise InputError(str(e))
    if "dashboard" in dash and "panels" not in dash:  # an export wrapped for the API
        dash = dash["dashboard"]
        _shape(isinstance(dash, dict), path, "\"dashboard\"",
               "is %s, not an object" % outfile.json_kind(dash))
    panels = dash.get("panels")
    if not isinstance(panels, list) or not panels:
        raise InputError("%s: no \"panels\" list" % path)
    for key in ("title",):
        _shape(_opt(dash, key, (str,)), path, key, "is not a string")
    tm = dash.get("time", {})
    _shape(isinstance(tm, dict) and _opt(tm, "from", (str,)) and _opt(tm, "to", (str,)),
           path, "time", "is not {from: string, to: string}")
    tpl = dash.get("templating", {})
    _shape(isinstance(tpl, dict) and isinstance(tpl.get("list", []), list), path,
           "templating", "is not {list: [...]}")
    for var in tpl.get("list", []):
        _shape(isinstance(var, dict), path, "templating.list",
               "holds %s, not an object" % outfile.json_kind(var))
        for key in ("name", "type", "label", "allValue"):
            _shape(_opt(var, key, (str,)), path, "template variable %r" % var.get("name"),
                   "%s is not a string" % key)
        _shape(_opt(var, "query", (str, dict)), path,
               "template variable %r" % var.get("name"), "query is not a string or object")
        q = var.get("query")
        _shape(not isinstance(q, dict) or _opt(q, "query", (str,)), path,
               "template variable %r" % var.get("name"), "query.query is not a string")
        _shape(_opt(var, "current", (dict,)), path,
               "template variable %r" % var.get("name"), "current is not an object")
        _shape(_opt(var, "hide", (int,)), path,
               "template variable %r" % var.get("name"), "hide is not a number")
    flat = []
    for i, p in enumerate(panels):
        check_panel(path, p, i)
        flat.append(p)
        if p.get("type") == "row":
            sub = p.get("panels", [])
            _shape(isinstance(sub, list), path, "row %r" % p.get("title"),
                   "panels is not a list")
            for j, q in enumerate(sub):
                check_panel(path, q, "%d.%d" % (i, j))
            flat.extend(sub)
    return dash, flat


def parse_pairs(items, what):
    out = {}
    for item in items:
        name, sep, vals = item.partition("=")
        if not sep or not name or not vals:
            raise InputError("%s %r: want NAME=VALUE[,VALUE...]" % (what, item))
        out[name] = [v for v in vals.split(",") if v]
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prometheus", required=True, help="base URL, e.g. http://127.0.0.1:9090")
    ap.add_argument("--dashboard", required=True, help="the dashboard JSON")
    ap.add_argument("--out", required=True, help="the HTML page to write")
    ap.add_argument("--from", dest="frm", help="range start (default the dashboard's)")
    ap.add_argument("--to", help="range end (default the dashboard's)")
    ap.add_argument("--var", action="append", default=[], metavar="NAME=V[,V]",
                    help="pick values of a template variable (default: as saved, All)")
    ap.add_argument("--scrape-interval", help="the data source's scrape interval "
                    "(default: Prometheus's global scrape_interval)")
    ap.add_argument("--report", help="write what every panel got as JSON here")
    ap.add_argument("--expect", action="append", default=[], metavar="LABEL=V1,V2",
                    help="fail unless every query has a series for each value of LABEL")
    ap.add_argument("--now", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    try:
        outfile.check_output(a.out, [a.dashboard], "--out")
        if a.report:  # nor the page: a hard link to it is the same file
            outfile.check_output(a.report, [a.dashboard, a.out], "--report")
        if a.report and os.path.realpath(a.report) == os.path.realpath(a.out):
            raise InputError("--report %s is the --out page: name two files" % a.report)
    except outfile.FileError as e:
        print("grafana_preview: " + str(e), file=sys.stderr)
        return 2
    except InputError as e:
        print("grafana_preview: " + str(e), file=sys.stderr)
        return 2
    try:
        if a.now is not None:
            try:
                a.now = outfile.finite(a.now, "--now")
            except ValueError as e:
                raise InputError(str(e))
            if not 0 <= a.now <= LATEST_TIME:
                raise InputError("--now %r is outside 1970 to 9999 (epoch seconds)" % a.now)
        dash, panels = load_dashboard(a.dashboard)
        expect = parse_pairs(a.expect, "--expect")
        overrides = parse_pairs(a.var, "--var")
        frm = a.frm or dash.get("time", {}).get("from", "now-1h")
        to = a.to or dash.get("time", {}).get("to", "now")
        now = a.now if a.now is not None else datetime.datetime.now().timestamp()
        start, end = parse_time(str(frm), now), parse_time(str(to), now)
        if end <= start:
            raise InputError("the range %s to %s is empty" % (frm, to))
        if not re.match(r"https?://", a.prometheus):
            raise InputError("--prometheus %r: want http://HOST:PORT" % a.prometheus)
        for p in panels:
            unit = p.get("fieldConfig", {}).get("defaults", {}).get("unit", "")
            if unit not in KNOWN_UNITS:
                print("grafana_preview: panel %r: unit %r shown as a suffix"
                      % (p.get("title"), unit), file=sys.stderr)
        prom = Prometheus(a.prometheus)
        scrape_s = parse_duration(a.scrape_interval) if a.scrape_interval \
            else prom.scrape_interval()
        values = resolve_variables(dash, prom, start, end, overrides)
        inner = PAGE_WIDTH - 2 * PAGE_PADDING
        done = [(p, [] if p.get("type") in ("row", "text") else
                 run_panel(p, prom, values, start, end, scrape_s, inner)) for p in panels]
    except InputError as e:
        print("grafana_preview: " + str(e), file=sys.stderr)
        return 2
    except QueryError as e:
        print("grafana_preview: " + str(e), file=sys.stderr)
        return 1
    page = render(dash, a.dashboard, values, done, start, end, frm, to, scrape_s)
    problems = []
    report = {"dashboard": a.dashboard, "from": start, "to": end, "scrape_interval": scrape_s,
              "variables": {k: {"shown": v["shown"], "values": v.get("found", []),
                                "regex": v["regex"]} for k, v in values.items()},
              "panels": []}
    for p, results in done:
        kind = p.get("type")
        entry = {"id": p.get("id"), "title": p.get("title"), "type": kind,
                 "gridPos": p["gridPos"], "drawn": kind in DRAWN_TYPES,
                 "unit": p.get("fieldConfig", {}).get("defaults", {}).get("unit", ""),
                 "targets": []}
        if kind not in DRAWN_TYPES:
            problems.append("panel %r: type %r is not drawn" % (p.get("title"), kind))
        for r in results:
            entry["targets"].append({
                "refId": r["refId"], "expr": r["expr"], "error": r["error"],
                "step": r["step"],
                "series": [{"legend": s["legend"], "labels": s["metric"],
                            "points": len(s["points"]),
                            "last": reduce_last(s["points"])} for s in r["series"]]})
            if r["error"]:
                problems.append("panel %r %s: %s" % (p.get("title"), r["refId"], r["error"]))
                continue
            for label, want in expect.items():
                if not any(label in s["metric"] for s in r["series"]):
                    continue  # summed over LABEL (a heatmap's by le), or no data here
                got = {s["metric"].get(label) for s in r["series"] if s["points"]}
                missing = [v for v in want if v not in got]
                if missing:
                    problems.append("panel %r query %s: no series with %s=%s:\n  %s"
                                    % (p.get("title"), r["refId"], label,
                                       ",".join(missing), r["expr"]))
        report["panels"].append(entry)
    report["problems"] = problems
    try:
        outfile.write_all([(a.out, page)] +
                          ([(a.report, json.dumps(report, indent=1))] if a.report else []))
    except outfile.FileError as e:
        print("grafana_preview: " + str(e), file=sys.stderr)
        return 2
    for msg in problems:
        print("grafana_preview: " + msg, file=sys.stderr)
    nseries = sum(len(r["series"]) for _, rs in done for r in rs)
    print("grafana_preview: %d panels, %d series, %s -> %s"
          % (len(done), nseries, relative_label(frm, to), a.out))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
