/*
 * charts.js — the canvas charts: the shared drawing helpers (a canvas sized
 * for the screen, axis steps, colours from the style sheet), the memory
 * chart over time (stored history, then live points; policy-change markers,
 * the zoom selection, the tooltip) and the two request-size histograms
 * (since start, last minute) with the class boundaries. The memory chart's
 * mouse handling is wired up in app.js.
 */
import { $, RECENT_MS, setText, state } from "./common.js";
import { bucketLower, fmtBytes, fmtClock, fmtCount, fmtPct, num } from "./format.js";

// ------------------------------------------------------------ canvas
export function setupCanvas(c) {
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
export function css(name) {
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
export function emptyNote(g, w, h, text) {
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
// the axis spans exactly what the range button says (the part without data
// is marked as such, drawMemory); "run" spans the run (one minute at least)
function memWindow(pts) {
  const now = Date.now();
  if (state.zoom) return { t0: state.zoom.t0, t1: state.zoom.t1 };
  if (state.range > 0) return { t0: now - state.range, t1: now };
  let t0 = state.uptimeMs > 0 ? now - state.uptimeMs : (pts.length ? pts[0].t : now);
  return { t0: Math.min(t0, now - 60000), t1: now };
}
// why there is nothing before the first point, for the note drawn there
function noDataText(first) {
  if (state.historyOff) {
    return ["the store is off: no history, only what this page saw since it opened",
      "(start the process with ADAPTALLOC_DB=<file>, not off, to keep it)"];
  }
  return first === null ? ["waiting for data…"] : ["no data before " + fmtClock(first, true)];
}
const TIME_TICKS = [1e3, 5e3, 10e3, 30e3, 60e3, 300e3, 600e3, 1800e3, 3600e3, 3 * 3600e3, 6 * 3600e3, 12 * 3600e3, 86400e3];

export function drawMemory() {
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
  c.dataset.t0 = String(Math.round(t0));
  c.dataset.t1 = String(Math.round(t1));
  c.dataset.historyOff = state.historyOff ? "1" : "0";
  state.memLayout = null;
  if (pts.length === 0) {
    const lines = noDataText(null);
    c.dataset.empty = lines.join(" ");
    if (state.historyOff) lines.unshift("waiting for data…");
    lines.forEach((t, i) => emptyNote(g, w, h + (i * 2 - lines.length + 1) * 16, t));
    setText("mem-note", "");
    return;
  }
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
  // the part of the axis before the first point: shaded, and why it is empty
  const firstT = pts[0].t;
  c.dataset.empty = "";
  if (x(firstT) - L > 24) {
    const x1 = Math.min(x(firstT), w - R);
    g.globalAlpha = 0.06;
    g.fillStyle = css("--muted");
    g.fillRect(L, T, x1 - L, h - T - B);
    g.globalAlpha = 1;
    const lines = noDataText(firstT);
    c.dataset.empty = lines.join(" ");
    g.fillStyle = css("--muted");
    g.textAlign = "center";
    g.textBaseline = "middle";
    const mid = (L + x1) / 2;
    if (x1 - L > 200) lines.forEach((t, i) => g.fillText(t, mid, (T + h - B) / 2 + (i - (lines.length - 1) / 2) * 16));
  }
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
  setText("mem-note", (shown ? shown + " · " : "") + (state.historyOff ? "the store is off (ADAPTALLOC_DB=off): live points only · " : "") + "now " + fmtBytes(last.inUse) + " in use of " +
    fmtBytes(last.reserved) + " reserved (large path " + fmtBytes(last.largeReserved) + ")");
}

export function memTip(ev) {
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

export function drawHistogram(pool) {
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
export function histCounts(pool) {
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
