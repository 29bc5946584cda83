/*
 * app.js — the adaptalloc dashboard. No build step, no libraries, nothing
 * fetched from elsewhere: it polls /stats every second and draws by hand on
 * <canvas>:
 *  - memory over time from the store's snapshots (/history, any range, thinned
 *    by the server with step=), the live /stats points after them, in use,
 *    reserved, the small classes' and the large path's share, and a marker at
 *    every policy change; drag to zoom, hover for the values;
 *  - the request-size histogram since start and over the last minute (the
 *    difference of two /stats snapshots), with the class boundaries;
 *  - the large path's segments and their used and free pieces (/segments);
 * and lists the classes (sortable), the policy changes with a diff between
 * any two versions (/history?policies=1), the policy loop's class-table
 * decisions with their predicted and measured effect (/stats adapt.audit),
 * and edits the policy (PUT /policy with If-Match, and a bearer token when
 * one is entered).
 *
 * Shapes read: /stats {"pools": [aa_pool_stats_json ...], "policy_version",
 * "adapt"}, see docs/stats.md; /history {"snapshots", "policy_changes"}, /segments:
 * docs/http.md.
 */
"use strict";
(() => {
  const POLL_MS = 1000;
  const HISTORY_MS = 5000;
  const SEGMENTS_MS = 5000;
  const KEEP_MS = 5 * 60 * 1000;   // live points kept (history covers the rest)
  const RECENT_MS = 60 * 1000;     // the recent-window histogram
  const MEM_POINTS = 1000;         // points asked of /history over any range

  const $ = (id) => document.getElementById(id);
  const state = {
    pools: [],
    pool: null,          // selected pool name
    series: new Map(),   // pool name -> [{t, inUse, reserved}]
    prev: new Map(),     // pool name -> previous snapshot (for rates)
    rate: new Map(),     // pool name -> allocs per second
    policyVersion: null,
    etag: null,
    dirty: false,
    overwrite: false,
    lastOk: 0,
    range: 3600000,      // ms shown, 0 = the whole run
    zoom: null,          // {t0, t1} while zoomed
    drag: null,          // {x0, x1} while selecting
    uptimeMs: 0,
    stored: new Map(),   // pool name -> [{t, inUse, reserved, largeReserved, largeInUse}]
    changes: [],         // [{t, source, from, to, reason, policy}]
    histRing: new Map(), // pool name -> [{t, counts: Map bucket -> count}]
    segs: null,          // /segments answer for the selected pool, or {error}
    sort: { key: "block", dir: 1 },
    diffPick: null,      // {from, to} versions chosen by the user
    memLayout: null,
    segLayout: null,
  };

  // ------------------------------------------------------------ formatting
  const UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  function fmtBytes(n) {
    if (n === undefined || n === null || !isFinite(n)) return "–";
    let u = 0;
    let v = Math.abs(n);
    while (v >= 1024 && u < UNITS.length - 1) { v /= 1024; u++; }
    const digits = u === 0 ? 0 : v >= 100 ? 0 : v >= 10 ? 1 : 2;
    // trailing zeros say nothing: "2 MiB", "1.5 KiB", "14.7 MiB"
    const text = v.toFixed(digits).replace(/\.0+$/, "").replace(/(\.\d*[1-9])0+$/, "$1");
    return (n < 0 ? "-" : "") + text + " " + UNITS[u];
  }
  function fmtCount(n) {
    if (n === undefined || n === null || !isFinite(n)) return "–";
    const a = Math.abs(n);
    const t = (v, d) => v.toFixed(d).replace(/\.0$/, "");
    if (a >= 1e9) return t(n / 1e9, a >= 1e10 ? 0 : 1) + " G";
    if (a >= 1e6) return t(n / 1e6, a >= 1e7 ? 0 : 1) + " M";
    if (a >= 1e4) return t(n / 1e3, a >= 1e5 ? 0 : 1) + " k";
    return String(Math.round(n));
  }
  function fmtPct(x) {
    if (x === undefined || x === null || !isFinite(x)) return "–";
    const p = x * 100;
    return (p >= 10 || p === 0 ? p.toFixed(0) : p.toFixed(1)) + " %";
  }
  function fmtTime(ms) {
    const d = new Date(ms);
    const pad = (v) => String(v).padStart(2, "0");
    return pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
  }
  function fmtUptime(sec) {
    if (sec < 60) return Math.floor(sec) + " s";
    if (sec < 3600) return Math.floor(sec / 60) + " min";
    if (sec < 86400) return Math.floor(sec / 3600) + " h " + Math.floor((sec % 3600) / 60) + " min";
    return Math.floor(sec / 86400) + " d " + Math.floor((sec % 86400) / 3600) + " h";
  }
  const num = (v) => (typeof v === "number" && isFinite(v) ? v : 0);
  // a change in bytes as signed MiB: "-1.50 MiB", "+0.25 MiB", "0 MiB"
  function fmtDeltaMiB(d) {
    if (d === null || !isFinite(d)) return "–";
    if (d === 0) return "0 MiB";
    return (d > 0 ? "+" : "-") + (Math.abs(d) / 1048576).toFixed(2) + " MiB";
  }

  // core's histogram buckets: 0..3 exact, then four per doubling
  function bucketLower(i) {
    if (i < 4) return i;
    const l = Math.floor(i / 4) + 1;
    const m = i % 4;
    return (4 + m) * Math.pow(2, l - 2);
  }

  // ------------------------------------------------------------ fetch
  function authHeaders() {
    const t = $("token").value.trim();
    return t ? { Authorization: "Bearer " + t } : {};
  }
  async function errorText(r) {
    let text = "";
    try {
      const body = await r.text();
      try {
        const j = JSON.parse(body);
        text = j.error || body;
      } catch (e) {
        text = body;
      }
    } catch (e) {
      text = "";
    }
    return "HTTP " + r.status + (text ? ": " + text.trim() : "");
  }

  // ------------------------------------------------------------ canvas
  function setupCanvas(c) {
    const dpr = window.devicePixelRatio || 1;
    const w = Math.max(100, c.clientWidth);
    const h = Math.max(80, c.clientHeight);
    if (c.width !== Math.round(w * dpr) || c.height !== Math.round(h * dpr)) {
      c.width = Math.round(w * dpr);
      c.height = Math.round(h * dpr);
    }
    const g = c.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, w, h);
    g.font = "11px system-ui, sans-serif";
    return { g, w, h };
  }
  function css(name) {
    return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  }
  // a "nice" step for about n ticks over [0, max], in binary units for bytes
  function byteStep(max, n) {
    const raw = max / n;
    let unit = 1;
    while (unit * 1024 <= raw) unit *= 1024;
    const r = raw / unit;
    const m = r <= 1 ? 1 : r <= 2 ? 2 : r <= 2.5 ? 2.5 : r <= 5 ? 5 : r <= 10 ? 10 : r <= 20 ? 20 : r <= 25 ? 25 : r <= 50 ? 50 : r <= 100 ? 100 : r <= 200 ? 200 : r <= 250 ? 250 : 500;
    return m * unit;
  }
  function countStep(max, n) {
    const raw = max / n;
    const p = Math.pow(10, Math.floor(Math.log10(Math.max(raw, 1))));
    const r = raw / p;
    return (r <= 1 ? 1 : r <= 2 ? 2 : r <= 5 ? 5 : 10) * p;
  }
  function emptyNote(g, w, h, text) {
    g.fillStyle = css("--muted");
    g.textAlign = "center";
    g.fillText(text, w / 2, h / 2);
  }

  // ------------------------------------------------------------ memory chart
  // stored points, then the live ones after the last stored
  function memPoints() {
    const stored = state.stored.get(state.pool) || [];
    const live = state.series.get(state.pool) || [];
    const lastT = stored.length ? stored[stored.length - 1].t : 0;
    return stored.concat(live.filter((p) => p.t > lastT));
  }
  function memWindow(pts) {
    const now = Date.now();
    if (state.zoom) return { t0: state.zoom.t0, t1: state.zoom.t1 };
    let t0 = state.range > 0 ? now - state.range : (pts.length ? pts[0].t : now - 60000);
    // less data than the range: start at the first point (one minute at least)
    if (pts.length && pts[0].t > t0) t0 = Math.min(pts[0].t, now - 60000);
    return { t0, t1: now };
  }
  const TIME_TICKS = [1e3, 5e3, 10e3, 30e3, 60e3, 300e3, 600e3, 1800e3, 3600e3, 3 * 3600e3, 6 * 3600e3, 12 * 3600e3, 86400e3];
  function fmtClock(ms, withSec) {
    const d = new Date(ms);
    const pad = (v) => String(v).padStart(2, "0");
    return pad(d.getHours()) + ":" + pad(d.getMinutes()) + (withSec ? ":" + pad(d.getSeconds()) : "");
  }

  function drawMemory() {
    const c = $("chart-mem");
    const { g, w, h } = setupCanvas(c);
    const all = memPoints();
    const L = 64, R = 12, T = 16, B = 24;
    const { t0, t1 } = memWindow(all);
    const span = Math.max(1, t1 - t0);
    // the points in the window, and one on each side for the edges
    let i0 = 0, i1 = all.length;
    while (i0 < all.length && all[i0].t < t0) i0++;
    while (i1 > 0 && all[i1 - 1].t > t1) i1--;
    const pts = all.slice(Math.max(0, i0 - 1), Math.min(all.length, i1 + 1));
    const marks = state.changes.filter((e) => e.t !== null && e.t >= t0 && e.t <= t1);
    c.dataset.points = String(Math.max(0, i1 - i0));
    c.dataset.markers = String(marks.length);
    c.dataset.stored = String((state.stored.get(state.pool) || []).length);
    state.memLayout = null;
    if (pts.length === 0) { emptyNote(g, w, h, "waiting for data…"); return; }
    let max = 0;
    for (const p of pts) max = Math.max(max, p.reserved, p.inUse);
    if (max <= 0) max = 1024;
    const step = byteStep(max * 1.1, 5);
    const top = Math.ceil((max * 1.05) / step) * step;
    const x = (t) => L + ((t - t0) / span) * (w - L - R);
    const y = (v) => T + (1 - v / top) * (h - T - B);
    state.memLayout = { L, R, T, B, w, h, t0, t1, top, pts, marks, x, y };
    g.save();
    g.strokeStyle = css("--line");
    g.fillStyle = css("--muted");
    g.lineWidth = 1;
    g.textAlign = "right";
    g.textBaseline = "middle";
    for (let v = 0; v <= top + step / 2; v += step) {
      g.beginPath();
      g.moveTo(L, Math.round(y(v)) + 0.5);
      g.lineTo(w - R, Math.round(y(v)) + 0.5);
      g.stroke();
      g.fillText(fmtBytes(v), L - 6, y(v));
    }
    // time labels at a round step, about six over the width
    g.textBaseline = "top";
    g.textAlign = "center";
    const tick = TIME_TICKS.find((d) => span / d <= 7) || 86400e3;
    const off = new Date().getTimezoneOffset() * 60000;
    for (let t = Math.ceil((t0 - off) / tick) * tick + off; t <= t1; t += tick) {
      g.fillText(fmtClock(t, tick < 60e3), x(t), h - B + 6);
    }
    g.beginPath();
    g.rect(L, 0, w - L - R, h);
    g.clip();
    const path = (key) => {
      g.beginPath();
      pts.forEach((p, i) => {
        const v = typeof key === "function" ? key(p) : p[key];
        if (i === 0) g.moveTo(x(p.t), y(v)); else g.lineTo(x(p.t), y(v));
      });
    };
    const area = (key, color) => {
      path(key);
      g.lineTo(x(pts[pts.length - 1].t), y(0));
      g.lineTo(x(pts[0].t), y(0));
      g.closePath();
      g.globalAlpha = 0.12;
      g.fillStyle = color;
      g.fill();
      g.globalAlpha = 1;
    };
    const stroke = (key, color, width, dash) => {
      path(key);
      g.strokeStyle = color;
      g.lineWidth = width;
      g.setLineDash(dash || []);
      g.stroke();
      g.setLineDash([]);
    };
    area("reserved", css("--reserved"));
    area("inUse", css("--inuse"));
    stroke((p) => Math.max(0, p.reserved - p.largeReserved), css("--small"), 1.5, [5, 3]);
    stroke("largeReserved", css("--large"), 1.5, [5, 3]);
    stroke("reserved", css("--reserved"), 2);
    stroke("inUse", css("--inuse"), 2);
    // policy changes: a red line and the version they brought
    g.fillStyle = css("--change");
    g.strokeStyle = css("--change");
    g.lineWidth = 1.5;
    g.textAlign = "left";
    g.textBaseline = "top";
    for (const e of marks) {
      const px = Math.round(x(e.t)) + 0.5;
      g.beginPath();
      g.moveTo(px, T);
      g.lineTo(px, h - B);
      g.stroke();
      g.fillText("v" + e.to, px + 3, 2);
    }
    // the zoom selection
    if (state.drag && Math.abs(state.drag.x1 - state.drag.x0) > 2) {
      g.globalAlpha = 0.15;
      g.fillStyle = css("--accent");
      g.fillRect(Math.min(state.drag.x0, state.drag.x1), T, Math.abs(state.drag.x1 - state.drag.x0), h - T - B);
      g.globalAlpha = 1;
    }
    g.restore();
    const last = all[all.length - 1];
    const shown = state.zoom ? "zoomed " + fmtClock(t0, true) + "–" + fmtClock(t1, true) : "";
    setText("mem-note", (shown ? shown + " · " : "") + "now " + fmtBytes(last.inUse) + " in use of " +
      fmtBytes(last.reserved) + " reserved (large path " + fmtBytes(last.largeReserved) + ")");
  }

  function memTip(ev) {
    const tip = $("mem-tip");
    const m = state.memLayout;
    const c = $("chart-mem");
    const rect = c.getBoundingClientRect();
    const px = ev.clientX - rect.left, py = ev.clientY - rect.top;
    if (!m || state.drag || px < m.L || px > m.w - m.R || !m.pts.length) { tip.hidden = true; return; }
    const t = m.t0 + ((px - m.L) / (m.w - m.L - m.R)) * (m.t1 - m.t0);
    let best = m.pts[0];
    for (const p of m.pts) if (Math.abs(p.t - t) < Math.abs(best.t - t)) best = p;
    const lines = [
      fmtClock(best.t, true),
      "in use     " + fmtBytes(best.inUse),
      "reserved   " + fmtBytes(best.reserved),
      "  small    " + fmtBytes(Math.max(0, best.reserved - best.largeReserved)),
      "  large    " + fmtBytes(best.largeReserved) + " (" + fmtBytes(best.largeInUse) + " in use)",
    ];
    for (const e of m.marks) {
      if (Math.abs(m.x(e.t) - px) <= 6) {
        lines.push("policy v" + (e.from !== null ? e.from + " → " : "") + "v" + e.to + " (" + e.source + ")");
        if (e.reason) lines.push("  " + e.reason.slice(0, 80));
      }
    }
    tip.textContent = lines.join("\n");
    tip.hidden = false;
    tip.style.left = Math.min(px + 14, rect.width - 260) + "px";
    tip.style.top = Math.max(0, py - 10) + "px";
  }

  function setupMemoryChart() {
    const c = $("chart-mem");
    const xOf = (ev) => ev.clientX - c.getBoundingClientRect().left;
    c.addEventListener("mousedown", (ev) => { state.drag = { x0: xOf(ev), x1: xOf(ev) }; });
    c.addEventListener("mousemove", (ev) => {
      if (state.drag) { state.drag.x1 = xOf(ev); drawMemory(); }
      memTip(ev);
    });
    c.addEventListener("mouseleave", () => { $("mem-tip").hidden = true; });
    window.addEventListener("mouseup", () => {
      const d = state.drag, m = state.memLayout;
      state.drag = null;
      if (!d || !m) return;
      if (Math.abs(d.x1 - d.x0) > 5) {
        const tx = (px) => m.t0 + ((px - m.L) / (m.w - m.L - m.R)) * (m.t1 - m.t0);
        const a = tx(Math.max(m.L, Math.min(d.x0, d.x1)));
        const b = tx(Math.min(m.w - m.R, Math.max(d.x0, d.x1)));
        if (b - a >= 2000) {
          state.zoom = { t0: a, t1: b };
          $("unzoom").hidden = false;
          pollHistory(false);
        }
      }
      drawMemory();
    });
    const unzoom = () => {
      state.zoom = null;
      $("unzoom").hidden = true;
      pollHistory(false);
      drawMemory();
    };
    c.addEventListener("dblclick", unzoom);
    $("unzoom").addEventListener("click", unzoom);
    for (const b of document.querySelectorAll("#range button[data-range]")) {
      b.addEventListener("click", () => {
        state.range = Number(b.dataset.range);
        for (const o of document.querySelectorAll("#range button[data-range]")) o.classList.toggle("on", o === b);
        state.zoom = null;
        $("unzoom").hidden = true;
        pollHistory(false);
        drawMemory();
      });
    }
  }

  // ------------------------------------------------------------ histograms
  function drawHist(canvasId, noteId, buckets, classes, color, emptyText, noteHead) {
    const c = $(canvasId);
    const { g, w, h } = setupCanvas(c);
    const L = 56, R = 24, T = 10, B = 24;
    c.dataset.bars = String(buckets.length);
    c.dataset.classes = String(classes.length);
    if (buckets.length === 0) {
      emptyNote(g, w, h, emptyText);
      setText(noteId, "");
      return;
    }
    // x range: powers of two around the data and the classes
    let lo = Infinity, hi = 0;
    for (const b of buckets) { lo = Math.min(lo, Math.max(b.lower, 1)); hi = Math.max(hi, b.upper); }
    for (const k of classes) { lo = Math.min(lo, num(k.block_size)); hi = Math.max(hi, num(k.block_size)); }
    let e0 = Math.floor(Math.log2(Math.max(lo, 1)));
    let e1 = Math.ceil(Math.log2(Math.max(hi, 2)));
    if (e1 - e0 < 3) { e0 = Math.max(0, e0 - 1); e1 = e0 + 4; }
    const x = (v) => L + ((Math.log2(Math.max(v, 1)) - e0) / (e1 - e0)) * (w - L - R);
    let maxc = 0;
    for (const b of buckets) maxc = Math.max(maxc, b.count);
    if (maxc <= 0) maxc = 1;
    const step = countStep(maxc * 1.1, 4);
    const top = Math.ceil((maxc * 1.05) / step) * step;
    const y = (v) => T + (1 - v / top) * (h - T - B);
    g.strokeStyle = css("--line");
    g.fillStyle = css("--muted");
    g.lineWidth = 1;
    g.textAlign = "right";
    g.textBaseline = "middle";
    for (let v = 0; v <= top + step / 2; v += step) {
      g.beginPath();
      g.moveTo(L, Math.round(y(v)) + 0.5);
      g.lineTo(w - R, Math.round(y(v)) + 0.5);
      g.stroke();
      g.fillText(fmtCount(v), L - 6, y(v));
    }
    // x labels at powers of two, thinned to fit
    g.textAlign = "center";
    g.textBaseline = "top";
    const every = Math.max(1, Math.ceil((e1 - e0) / Math.max(1, Math.floor((w - L - R) / 56))));
    for (let e = e0; e <= e1; e++) {
      if ((e - e0) % every) continue;
      g.textAlign = e === e1 ? "right" : e === e0 ? "left" : "center";
      g.fillText(fmtBytes(Math.pow(2, e)), x(Math.pow(2, e)) + (e === e1 ? R - 2 : 0), h - B + 6);
    }
    g.fillStyle = color;
    for (const b of buckets) {
      const x0 = x(Math.max(b.lower, 1));
      const x1 = x(b.upper + 1);
      const bw = Math.max(1, x1 - x0 - 1);
      g.fillRect(x0, y(b.count), bw, y(0) - y(b.count));
    }
    g.strokeStyle = css("--class");
    g.lineWidth = 1;
    g.setLineDash([3, 3]);
    for (const k of classes) {
      const px = Math.round(x(num(k.block_size))) + 0.5;
      g.globalAlpha = k.retiring ? 0.35 : 0.85;
      g.beginPath();
      g.moveTo(px, T);
      g.lineTo(px, h - B);
      g.stroke();
    }
    g.globalAlpha = 1;
    g.setLineDash([]);
    setText(noteId, noteHead(buckets.reduce((s, b) => s + b.count, 0)));
  }

  function drawHistogram(pool) {
    const classes = (pool && pool.classes) || [];
    const buckets = histBuckets(pool);
    const off = pool && pool.telemetry === false ? "telemetry is off for this pool" : "no requests yet";
    drawHist("chart-hist", "hist-note", buckets, classes, css("--hist"), off, (total) => {
      let note = fmtCount(total) + " requests since start · " + classes.length + " classes";
      const hh = (pool && Array.isArray(pool.hh) ? pool.hh : []).filter((e) => e && num(e.count) > 0);
      if (hh.length && total > 0) {
        const top = hh.reduce((a, b) => (num(b.count) > num(a.count) ? b : a));
        const sz = num(top.size);
        note += " · top size " + (sz % 1024 && sz < 1048576 ? sz + " B" : fmtBytes(sz)) + " (" + fmtPct(num(top.count) / total) + ")";
      }
      return note;
    });
    // the last minute: this snapshot's counts less those of a minute ago
    const ring = (pool && state.histRing.get(pool.name)) || [];
    let recent = [], secs = 0;
    if (ring.length >= 2) {
      const cur = ring[ring.length - 1];
      let base = ring[0];
      for (const r of ring) if (r.t <= cur.t - RECENT_MS) base = r;
      secs = Math.round((cur.t - base.t) / 1000);
      for (const [bucket, count] of cur.counts) {
        const d = count - (base.counts.get(bucket) || 0);
        if (d > 0) {
          const lower = bucketLower(bucket);
          recent.push({ lower, upper: Math.max(bucketLower(bucket + 1) - 1, lower), count: d });
        }
      }
      recent.sort((a, b) => a.lower - b.lower);
    }
    drawHist("chart-hist-recent", "hist-recent-note", recent, classes, css("--recent"),
      ring.length < 2 ? "collecting…" : "no requests in the last " + secs + " s",
      (total) => fmtCount(total) + " requests in the last " + secs + " s (" + fmtCount(total / Math.max(1, secs)) + "/s)");
  }
  function histCounts(pool) {
    const m = new Map();
    for (const b of histBuckets(pool)) m.set(b.bucket, b.count);
    return m;
  }

  // [{lower, upper, count}] from the sparse "hist" of aa_pool_stats_json
  function histBuckets(pool) {
    const out = [];
    if (!pool || !Array.isArray(pool.hist)) return out;
    pool.hist.forEach((e, i) => {
      let bucket, count;
      if (typeof e === "number") { bucket = i; count = e; }
      else if (e && typeof e === "object") { bucket = num(e.bucket); count = num(e.count); }
      else return;
      if (count <= 0) return;
      const lower = e && typeof e.lower === "number" ? e.lower : bucketLower(bucket);
      const upper = bucketLower(bucket + 1) - 1;
      out.push({ bucket, lower, upper: Math.max(upper, lower), count });
    });
    return out;
  }

  // ------------------------------------------------------------ rendering
  function setText(id, text) {
    const el = $(id);
    if (el.textContent !== text) el.textContent = text;
  }

  function renderCards(p) {
    setText("c-inuse", fmtBytes(num(p.bytes_in_use)));
    setText("c-inuse-s", "peak " + fmtBytes(num(p.peak_bytes_in_use)));
    setText("c-reserved", fmtBytes(num(p.bytes_reserved)));
    const lim = num(p.limit_bytes);
    setText("c-reserved-s", "peak " + fmtBytes(num(p.peak_bytes_reserved)) + (lim ? " · limit " + fmtBytes(lim) : ""));
    const small = num(p.bytes_in_use) - num(p.large_bytes_in_use);
    const waste = num(p.bytes_in_use) > 0 ? (num(p.bytes_in_use) - num(p.bytes_requested)) / num(p.bytes_in_use) : 0;
    setText("c-waste", fmtPct(Math.max(0, waste)));
    setText("c-waste-s", fmtBytes(Math.max(0, num(p.bytes_in_use) - num(p.bytes_requested))) + " lost to rounding up");
    const hits = num(p.cache_hits), misses = num(p.cache_misses);
    setText("c-hit", hits + misses > 0 ? fmtPct(hits / (hits + misses)) : "–");
    setText("c-hit-s", fmtCount(misses) + " misses · " + fmtCount(num(p.backend_allocs)) + " backend allocs");
    const rate = state.rate.get(p.name);
    setText("c-rate", rate === undefined ? fmtCount(num(p.allocs)) : fmtCount(rate) + "/s");
    setText("c-rate-s", fmtCount(num(p.allocs)) + " total · " + fmtCount(num(p.ooms)) + " OOM");
    const cls = p.classes || [];
    setText("c-classes", String(num(p.class_count) || cls.length));
    setText("c-classes-s", "small " + fmtBytes(small) + " · large " + fmtBytes(num(p.large_bytes_in_use)));
  }

  function renderClasses(p) {
    const tb = $("classes").tBodies[0];
    const rows = [];
    for (const k of p.classes || []) {
      const inUse = num(k.bytes_in_use);
      const waste = inUse > 0 ? Math.max(0, (inUse - num(k.bytes_requested)) / inUse) : -1;
      const hm = num(k.hits) + num(k.misses);
      const hitRate = hm > 0 ? num(k.hits) / hm : -1;
      rows.push({
        retiring: !!k.retiring,
        key: { block: num(k.block_size), slabs: num(k.slabs), inUse, reserved: num(k.bytes_reserved),
          hits: num(k.hits), misses: num(k.misses), hitRate, waste },
        cells: [
          fmtBytes(num(k.block_size)) + (k.retiring ? " (retiring)" : ""),
          fmtCount(num(k.slabs)),
          fmtBytes(inUse),
          fmtBytes(num(k.bytes_reserved)),
          fmtCount(num(k.hits)),
          fmtCount(num(k.misses)),
          hitRate >= 0 ? fmtPct(hitRate) : "–",
          waste >= 0 ? fmtPct(waste) : "–",
        ],
        // worth a look: a tenth wasted, on at least a MiB
        hot: waste > 0.1 && inUse >= 1048576,
      });
    }
    const { key, dir } = state.sort;
    rows.sort((a, b) => (a.key[key] - b.key[key]) * dir || a.key.block - b.key.block);
    for (const th of $("classes").tHead.rows[0].cells) {
      th.className = th.dataset.key === key ? (dir > 0 ? "asc" : "desc") : "";
    }
    while (tb.rows.length > rows.length) tb.deleteRow(-1);
    rows.forEach((r, i) => {
      const tr = tb.rows[i] || tb.insertRow(-1);
      tr.className = r.retiring ? "retiring" : "";
      tr.dataset.block = String(r.key.block);
      while (tr.cells.length < r.cells.length) tr.insertCell(-1);
      r.cells.forEach((t, j) => {
        if (tr.cells[j].textContent !== t) tr.cells[j].textContent = t;
      });
      tr.cells[7].className = r.hot ? "hot" : "";
    });
  }

  // ------------------------------------------------------------ segments
  function drawSegments() {
    const c = $("seg-map");
    const d = state.segs;
    const segs = d && Array.isArray(d.segments) ? d.segments : [];
    // rows shrink so that up to a hundred segments fit the panel at once
    const ROW = Math.max(3, Math.min(12, Math.floor(400 / Math.max(1, segs.length)) - 2));
    const GAP = ROW >= 9 ? 3 : 1, L = 78, R = 12, T = 4;
    c.style.height = Math.max(60, T * 2 + segs.length * (ROW + GAP)) + "px";
    const { g, w, h } = setupCanvas(c);
    c.dataset.segments = String(segs.length);
    state.segLayout = null;
    if (!d) { emptyNote(g, w, h, "waiting for data…"); return; }
    if (d.error) { emptyNote(g, w, h, d.error); setText("seg-note", ""); return; }
    if (!segs.length) { emptyNote(g, w, h, "no large segments: every block fits a size class"); setText("seg-note", ""); return; }
    let maxSize = 1;
    for (const sg of segs) maxSize = Math.max(maxSize, num(sg.size));
    const scale = (w - L - R) / maxSize;
    state.segLayout = { ROW, GAP, L, T, scale, segs };
    g.textAlign = "right";
    g.textBaseline = "middle";
    segs.forEach((sg, i) => {
      const y0 = T + i * (ROW + GAP);
      g.fillStyle = css("--muted");
      // a label where there is room: every row when tall, else every 10th
      if (ROW >= 9 || i % 10 === 0) g.fillText(fmtBytes(num(sg.size)), L - 6, y0 + ROW / 2);
      let x0 = L;
      for (const pc of sg.pieces || []) {
        const pw = num(pc[0]) * scale;
        g.fillStyle = pc[1] ? css("--large") : css("--free");
        g.fillRect(x0, y0, Math.max(0.5, pw - 0.5), ROW);
        x0 += pw;
      }
      if (ROW >= 6) {
        g.strokeStyle = "#cbd5e1";
        g.strokeRect(L + 0.5, y0 + 0.5, num(sg.size) * scale - 1, ROW - 1);
      }
    });
    const free = num(d.bytes) - num(d.used_bytes);
    setText("seg-note", fmtCount(num(d.segment_count)) + " segments · " + fmtBytes(num(d.bytes)) + " held · " +
      fmtBytes(num(d.used_bytes)) + " in use · " + fmtBytes(free) + " free (" +
      fmtPct(num(d.bytes) > 0 ? free / num(d.bytes) : 0) + ")" + (d.truncated ? " · first " + segs.length + " shown" : ""));
  }
  function segTip(ev) {
    const tip = $("seg-tip");
    const m = state.segLayout;
    const c = $("seg-map");
    const rect = c.getBoundingClientRect();
    const px = ev.clientX - rect.left, py = ev.clientY - rect.top;
    const i = m ? Math.floor((py - m.T) / (m.ROW + m.GAP)) : -1;
    if (!m || i < 0 || i >= m.segs.length || px < m.L) { tip.hidden = true; return; }
    const sg = m.segs[i];
    let x0 = m.L, piece = null;
    for (const pc of sg.pieces || []) {
      const pw = num(pc[0]) * m.scale;
      if (px >= x0 && px < x0 + pw) piece = pc;
      x0 += pw;
    }
    const lines = ["segment " + sg.address + (sg.expandable ? " (expandable)" : ""),
      fmtBytes(num(sg.size)) + ", " + fmtBytes(num(sg.used)) + " in use in " +
      (sg.pieces || []).filter((pc) => pc[1]).length + " blocks"];
    if (piece) lines.push((piece[1] ? "block in use: " : "free: ") + fmtBytes(num(piece[0])));
    tip.textContent = lines.join("\n");
    tip.hidden = false;
    tip.style.left = Math.min(px + 14, rect.width - 240) + "px";
    tip.style.top = (py + 12) + "px";
  }
  async function fetchSegments() {
    if (state.pool === null) return;
    const pool = state.pool;
    const r = await fetch("/segments?pool=" + encodeURIComponent(pool), { cache: "no-store" });
    const d = r.ok ? await r.json() : { error: await errorText(r) };
    if (pool !== state.pool) return; // the user picked another pool meanwhile
    state.segs = d;
    drawSegments();
  }
  async function pollSegments() {
    try {
      await fetchSegments();
    } catch (e) {
      /* the stats poll shows the connection state */
    } finally {
      setTimeout(pollSegments, SEGMENTS_MS);
    }
  }

  function renderPoolPicker() {
    const sel = $("pool");
    const names = state.pools.map((p) => p.name);
    const have = Array.from(sel.options).map((o) => o.value);
    if (names.join("\u0000") !== have.join("\u0000")) {
      sel.textContent = "";
      for (const p of state.pools) {
        const o = document.createElement("option");
        o.value = p.name;
        const where = (p.backend || "") + (p.device >= 0 ? " " + p.device : "");
        // a region's pool (adaptalloc.torch.region): "device0:kv_cache (region kv_cache, cuda 0)"
        const what = (typeof p.region === "string" && p.region ? "region " + p.region + ", " : "") + where;
        o.textContent = p.name + (what && what !== p.name ? " (" + what + ")" : "");
        sel.appendChild(o);
      }
    }
    if (!names.includes(state.pool)) {
      // the pool holding the most memory
      let best = state.pools[0];
      for (const p of state.pools) if (num(p.bytes_reserved) > num(best.bytes_reserved)) best = p;
      state.pool = best ? best.name : null;
    }
    if (state.pool !== null) sel.value = state.pool;
  }

  function render() {
    renderPoolPicker();
    const p = state.pools.find((q) => q.name === state.pool);
    if (!p) { drawMemory(); drawHistogram(null); return; }
    renderCards(p);
    renderClasses(p);
    drawMemory();
    drawHistogram(p);
  }

  function setConn(ok, why) {
    const el = $("conn");
    el.className = "pill " + (ok ? "pill-ok" : "pill-bad");
    el.textContent = ok ? "live" : "offline";
    el.title = ok ? "updated every second" : why || "";
  }

  // ------------------------------------------------------------ stats
  function onStats(s) {
    const pools = Array.isArray(s.pools) ? s.pools : Array.isArray(s) ? s : s && s.name ? [s] : [];
    const now = Date.now();
    state.pools = pools.filter((p) => p && typeof p.name === "string");
    for (const p of state.pools) {
      let arr = state.series.get(p.name);
      if (!arr) { arr = []; state.series.set(p.name, arr); }
      arr.push({ t: now, inUse: num(p.bytes_in_use), reserved: num(p.bytes_reserved),
        largeReserved: num(p.large_bytes_reserved), largeInUse: num(p.large_bytes_in_use) });
      while (arr.length && arr[0].t < now - KEEP_MS) arr.shift();
      let ring = state.histRing.get(p.name);
      if (!ring) { ring = []; state.histRing.set(p.name, ring); }
      ring.push({ t: now, counts: histCounts(p) });
      while (ring.length > 2 && ring[1].t <= now - RECENT_MS - 5000) ring.shift();
      const prev = state.prev.get(p.name);
      if (prev && num(p.time_ns) > num(prev.time_ns)) {
        const dt = (num(p.time_ns) - num(prev.time_ns)) / 1e9;
        state.rate.set(p.name, Math.max(0, (num(p.allocs) - num(prev.allocs)) / dt));
      }
      state.prev.set(p.name, { time_ns: p.time_ns, allocs: p.allocs });
    }
    let v = s.policy_version;
    if (v === undefined && s.policy && typeof s.policy === "object") v = s.policy.version;
    if (v !== undefined && v !== null) {
      setText("policy-version", String(v));
      if (state.policyVersion !== null && v !== state.policyVersion) {
        if (!state.dirty) loadPolicy();
        pollHistory(false);
      }
      state.policyVersion = v;
    }
    const info = [];
    if (typeof s.model === "string" && s.model) info.push("model " + s.model);
    if (typeof s.run_id === "number" && s.run_id > 0) info.push("run " + s.run_id);
    if (typeof s.uptime_s === "number") {
      info.push("up " + fmtUptime(s.uptime_s));
      state.uptimeMs = s.uptime_s * 1000;
    }
    setText("run-info", info.join(" · "));
    setText("updated", "updated " + fmtTime(now));
    renderLoop(s.adapt);
    const first = state.pool === null;
    render();
    if (first && state.pool !== null) fetchSegments().catch(() => {});
  }

  // ------------------------------------------------------------ loop decisions
  // /stats adapt: {"enabled", "steps", "rejected_by_replay", "audit": [{pool,
  // step, kind, block_size, applied, predicted: {peak_reserved_before,
  // peak_reserved_after, ...} | null, measured: {reserved_before,
  // reserved_after, after_steps} | null}]} (docs/stats.md)
  const LOOP_ROWS = 64;
  function loopDelta(o, before, after) {
    if (!o || typeof o !== "object") return null;
    const b = o[before], a = o[after];
    return typeof a === "number" && typeof b === "number" ? a - b : null;
  }
  function deltaCell(tr, d, title) {
    const td = tr.insertCell(-1);
    td.textContent = fmtDeltaMiB(d);
    td.className = d === null ? "muted" : d < 0 ? "gain" : d > 0 ? "loss" : "";
    if (title) td.title = title;
  }
  function renderLoop(a) {
    const tb = $("loop").tBodies[0];
    const empty = (text) => {
      delete tb.dataset.key;
      $("loop").dataset.rows = "0";
      tb.textContent = "";
      const td = tb.insertRow(-1).insertCell(-1);
      td.colSpan = 7;
      td.className = "muted";
      td.textContent = text;
    };
    if (!a || typeof a !== "object") {
      setText("loop-note", "");
      empty("this server publishes no policy-loop audit");
      return;
    }
    if (a.enabled === false) {
      setText("loop-note", "");
      empty("the policy loop is off");
      return;
    }
    const list = (Array.isArray(a.audit) ? a.audit : []).filter((e) => e && typeof e.pool === "string");
    const steps = num(a.steps);
    const applied = list.filter((e) => e.applied === true).length;
    setText("loop-note", "step " + fmtCount(steps) + " · " + fmtCount(num(a.rejected_by_replay)) +
      " rejected by replay · " + applied + " of " + list.length + " shown applied");
    const key = JSON.stringify([steps, list]);
    if (tb.dataset.key === key) return;
    tb.dataset.key = key;
    $("loop").dataset.rows = String(list.length);
    if (!list.length) { empty("no class-table changes yet"); return; }
    const rows = list.slice().sort((x, y) => num(y.step) - num(x.step) || (x.pool < y.pool ? -1 : 1));
    tb.textContent = "";
    for (const e of rows.slice(0, LOOP_ROWS)) {
      const tr = tb.insertRow(-1);
      const ago = steps >= num(e.step) ? steps - num(e.step) : null;
      const stepTd = tr.insertCell(-1);
      stepTd.textContent = String(num(e.step));
      if (ago !== null) stepTd.title = ago + " steps ago";
      tr.insertCell(-1).textContent = e.pool;
      tr.insertCell(-1).textContent = e.kind === "add_class" ? "add" : e.kind === "retire_class" ? "retire" : String(e.kind);
      tr.insertCell(-1).textContent = fmtBytes(num(e.block_size));
      const res = tr.insertCell(-1);
      res.textContent = e.applied === true ? "applied" : "rejected";
      res.className = e.applied === true ? "gain" : "loss";
      if (e.applied !== true) res.title = "not applied: the replay of the interval predicted no gain";
      const p = e.predicted;
      deltaCell(tr, loopDelta(p, "peak_reserved_before", "peak_reserved_after"),
        p ? fmtBytes(num(p.peak_reserved_before)) + " → " + fmtBytes(num(p.peak_reserved_after)) +
          ", backend calls " + fmtCount(num(p.backend_calls_before)) + " → " + fmtCount(num(p.backend_calls_after))
          : "nothing was replayed");
      const m = e.measured;
      deltaCell(tr, loopDelta(m, "reserved_before", "reserved_after"),
        m ? fmtBytes(num(m.reserved_before)) + " → " + fmtBytes(num(m.reserved_after)) +
          " after " + num(m.after_steps) + " steps"
          : e.applied === true ? "measured 3 steps after the change" : "not applied");
      if (e.applied !== true) tr.className = "rejected";
    }
  }

  async function pollStats() {
    try {
      const r = await fetch("/stats", { cache: "no-store" });
      if (!r.ok) throw new Error(await errorText(r));
      onStats(await r.json());
      state.lastOk = Date.now();
      setConn(true);
    } catch (e) {
      setConn(false, String(e && e.message ? e.message : e));
    } finally {
      setTimeout(pollStats, POLL_MS);
    }
  }

  // ------------------------------------------------------------ history
  function changeTime(e) {
    if (typeof e.ts_ms === "number") return e.ts_ms;
    if (typeof e.time_ms === "number") return e.time_ms;
    if (typeof e.time_ns === "number") return e.time_ns / 1e6;
    if (typeof e.time === "number") return e.time > 1e12 ? e.time : e.time * 1000;
    return null;
  }
  function renderChanges(note) {
    const tb = $("changes").tBodies[0];
    const list = state.changes;
    tb.textContent = "";
    if (!list.length) {
      const tr = tb.insertRow(-1);
      const td = tr.insertCell(-1);
      td.colSpan = 4;
      td.className = "muted";
      td.textContent = note || "none yet";
      return;
    }
    const pick = state.diffPick;
    for (const e of list.slice().reverse().slice(0, 200)) {
      const tr = tb.insertRow(-1);
      const cells = [
        e.t === null ? "–" : fmtClock(e.t, true),
        e.source,
        (e.from !== null ? e.from + " → " : "") + e.to,
        e.reason,
      ];
      for (const c of cells) tr.insertCell(-1).textContent = c;
      tr.dataset.to = String(e.to);
      if (pick && pick.to === e.to && pick.from === e.from) tr.className = "sel";
      tr.addEventListener("click", () => {
        state.diffPick = { from: e.from !== null && e.from > 0 ? e.from : e.to, to: e.to };
        renderChanges();
        renderDiffPickers();
        renderDiff();
      });
    }
  }
  function onHistory(h) {
    const snaps = Array.isArray(h.snapshots) ? h.snapshots : [];
    const byPool = new Map();
    for (const s of snaps) {
      if (!s || typeof s.pool !== "string") continue;
      const t = changeTime(s);
      if (t === null) continue;
      let arr = byPool.get(s.pool);
      if (!arr) { arr = []; byPool.set(s.pool, arr); }
      arr.push({ t, inUse: num(s.bytes_in_use), reserved: num(s.bytes_reserved),
        largeReserved: num(s.large_bytes_reserved), largeInUse: num(s.large_bytes_in_use) });
    }
    for (const arr of byPool.values()) arr.sort((a, b) => a.t - b.t);
    state.stored = byPool;
    const list = h.policy_changes || h.changes || [];
    state.changes = (Array.isArray(list) ? list : []).filter((e) => e && typeof e === "object").map((e) => ({
      t: changeTime(e),
      source: String(e.source || "–"),
      from: typeof e.old_version === "number" ? e.old_version : null,
      to: typeof e.new_version === "number" ? e.new_version : num(e.version),
      reason: String(e.reason || ""),
      policy: e.policy && typeof e.policy === "object" ? e.policy : null,
    }));
    renderChanges();
    renderDiffPickers();
    renderDiff();
    drawMemory();
  }
  async function pollHistory(again) {
    try {
      // about MEM_POINTS points over what is shown, thinned by the server
      const now = Date.now();
      let since = 0, span;
      if (state.zoom) { since = Math.floor(state.zoom.t0); span = state.zoom.t1 - state.zoom.t0; }
      else if (state.range > 0) { since = now - state.range; span = state.range; }
      else span = Math.max(60000, state.uptimeMs);
      const step = Math.max(1000, Math.floor(span / MEM_POINTS));
      const r = await fetch("/history?limit=10000&policies=1&step=" + step + (since > 0 ? "&since=" + since : ""), { cache: "no-store" });
      if (r.status === 503) {
        state.changes = [];
        renderChanges("the store is off: no history (" + (await errorText(r)) + ")");
      } else if (!r.ok) {
        state.changes = [];
        renderChanges(await errorText(r));
      } else {
        onHistory(await r.json());
      }
    } catch (e) {
      /* the stats poll shows the connection state */
    } finally {
      if (again) setTimeout(() => pollHistory(true), HISTORY_MS);
    }
  }

  // ------------------------------------------------------------ policy diff
  function withDocs() {
    const seen = new Map(); // version -> document (the latest record wins)
    for (const e of state.changes) if (e.policy) seen.set(e.to, e.policy);
    return seen;
  }
  function renderDiffPickers() {
    const docs = withDocs();
    const versions = Array.from(docs.keys()).sort((a, b) => a - b);
    for (const id of ["diff-from", "diff-to"]) {
      const sel = $(id);
      const have = Array.from(sel.options).map((o) => o.value).join(",");
      if (have !== versions.join(",")) {
        const keep = sel.value;
        sel.textContent = "";
        for (const v of versions) {
          const o = document.createElement("option");
          o.value = String(v);
          o.textContent = "v" + v;
          sel.appendChild(o);
        }
        if (versions.map(String).includes(keep)) sel.value = keep;
      }
    }
    if (!state.diffPick && versions.length) {
      const to = versions[versions.length - 1];
      const from = versions.length > 1 ? versions[versions.length - 2] : to;
      $("diff-from").value = String(from);
      $("diff-to").value = String(to);
    } else if (state.diffPick) {
      $("diff-from").value = String(state.diffPick.from);
      $("diff-to").value = String(state.diffPick.to);
    }
  }
  // the longest common subsequence of lines, as [" "|"-"|"+", text] rows
  function diffLines(a, b) {
    const n = a.length, m = b.length;
    const L = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
    for (let i = n - 1; i >= 0; i--)
      for (let j = m - 1; j >= 0; j--)
        L[i][j] = a[i] === b[j] ? L[i + 1][j + 1] + 1 : Math.max(L[i + 1][j], L[i][j + 1]);
    const out = [];
    let i = 0, j = 0;
    while (i < n && j < m) {
      if (a[i] === b[j]) { out.push([" ", a[i]]); i++; j++; }
      else if (L[i + 1][j] >= L[i][j + 1]) out.push(["-", a[i++]]);
      else out.push(["+", b[j++]]);
    }
    while (i < n) out.push(["-", a[i++]]);
    while (j < m) out.push(["+", b[j++]]);
    return out;
  }
  function renderDiff() {
    const pre = $("diff");
    const docs = withDocs();
    const from = Number($("diff-from").value), to = Number($("diff-to").value);
    pre.textContent = "";
    pre.dataset.added = "0";
    pre.dataset.removed = "0";
    if (!docs.size) {
      const sp = document.createElement("span");
      sp.className = "muted";
      sp.textContent = "no policy documents in the store for this range (the store is off, or an older server)";
      pre.appendChild(sp);
      setText("diff-note", "");
      return;
    }
    const strip = (d) => { const c = Object.assign({}, d); delete c.version; return JSON.stringify(c, null, 2).split("\n"); };
    const a = docs.has(from) ? strip(docs.get(from)) : [];
    const b = docs.has(to) ? strip(docs.get(to)) : [];
    const rows = diffLines(a, b);
    let added = 0, removed = 0;
    // changed lines with three lines of context; longer unchanged runs fold
    const keep = rows.map(() => false);
    rows.forEach((r, i) => {
      if (r[0] !== " ") for (let k = Math.max(0, i - 3); k <= Math.min(rows.length - 1, i + 3); k++) keep[k] = true;
    });
    let folded = 0;
    const flush = () => {
      if (!folded) return;
      const sp = document.createElement("span");
      sp.className = "gap";
      sp.textContent = "  … " + folded + " unchanged lines";
      pre.appendChild(sp);
      folded = 0;
    };
    rows.forEach((r, i) => {
      if (r[0] === "+") added++;
      if (r[0] === "-") removed++;
      if (!keep[i]) { folded++; return; }
      flush();
      const sp = document.createElement("span");
      sp.className = r[0] === "+" ? "add" : r[0] === "-" ? "del" : "ctx";
      sp.textContent = r[0] + " " + r[1];
      pre.appendChild(sp);
    });
    flush();
    pre.dataset.added = String(added);
    pre.dataset.removed = String(removed);
    setText("diff-note", from === to ? "the same version" : "v" + from + " → v" + to + ": " + added + " lines added, " + removed + " removed");
  }

  // ------------------------------------------------------------ policy
  function showMsg(text, kind) {
    const el = $("policy-msg");
    el.textContent = text;
    el.className = "msg" + (kind ? " " + kind : "");
  }
  async function loadPolicy() {
    try {
      const r = await fetch("/policy", { cache: "no-store" });
      if (!r.ok) { showMsg(await errorText(r), "err"); return; }
      const text = await r.text();
      let pretty = text;
      try { pretty = JSON.stringify(JSON.parse(text), null, 2); } catch (e) { /* keep */ }
      $("policy-text").value = pretty;
      state.etag = r.headers.get("ETag");
      state.dirty = false;
      state.overwrite = false;
      $("apply").textContent = "Apply (PUT /policy)";
      const v = state.etag ? state.etag.replace(/"/g, "") : "?";
      setText("editor-state", "version " + v + " in force");
    } catch (e) {
      showMsg("could not load the policy: " + e, "err");
    }
  }
  async function applyPolicy() {
    const btn = $("apply");
    const body = $("policy-text").value;
    const headers = Object.assign({ "Content-Type": "application/json" }, authHeaders());
    if (state.etag && !state.overwrite) headers["If-Match"] = state.etag;
    btn.disabled = true;
    showMsg("sending…", "");
    try {
      const r = await fetch("/policy", { method: "PUT", headers, body, cache: "no-store" });
      if (r.ok) {
        let v = r.headers.get("ETag");
        try { const j = await r.json(); if (j.version !== undefined) v = String(j.version); } catch (e) { /* ok */ }
        v = v ? String(v).replace(/"/g, "") : "?";
        showMsg("Applied: version " + v + " is in force.", "ok");
        state.dirty = false;
        await loadPolicy();
      } else if (r.status === 412) {
        showMsg(await errorText(r) + "\nThe policy changed since you loaded it. Reload to see it, or press Overwrite to replace it anyway.", "err");
        state.overwrite = true;
        btn.textContent = "Overwrite (PUT without If-Match)";
      } else {
        showMsg("Refused — " + (await errorText(r)), "err");
      }
    } catch (e) {
      showMsg("could not send: " + e, "err");
    } finally {
      btn.disabled = false;
    }
  }

  // ------------------------------------------------------------ start
  function start() {
    $("pool").addEventListener("change", (ev) => {
      state.pool = ev.target.value;
      state.segs = null;
      render();
      drawSegments();
      fetchSegments().catch(() => {});
    });
    setupMemoryChart();
    $("seg-map").addEventListener("mousemove", segTip);
    $("seg-map").addEventListener("mouseleave", () => { $("seg-tip").hidden = true; });
    for (const th of $("classes").tHead.rows[0].cells) {
      th.addEventListener("click", () => {
        const k = th.dataset.key;
        state.sort = { key: k, dir: state.sort.key === k ? -state.sort.dir : k === "block" ? 1 : -1 };
        render();
      });
    }
    for (const id of ["diff-from", "diff-to"]) {
      $(id).addEventListener("change", () => {
        state.diffPick = { from: Number($("diff-from").value), to: Number($("diff-to").value) };
        renderChanges();
        renderDiff();
      });
    }
    $("policy-text").addEventListener("input", () => {
      state.dirty = true;
      setText("editor-state", "edited, not applied");
    });
    $("apply").addEventListener("click", applyPolicy);
    $("reload").addEventListener("click", () => { showMsg("", ""); loadPolicy(); });
    window.addEventListener("resize", () => { render(); drawSegments(); });
    loadPolicy();
    pollStats();
    pollHistory(true);
    pollSegments();
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
