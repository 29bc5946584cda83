/*
 * segments.js — the large path's segment map (/segments for the selected
 * pool): one row per segment (an expandable reservation's mapped runs on one
 * row, mapped pages over reserved address space), its used and free pieces,
 * a tooltip, and its own poll.
 */
import { $, errorText, SEGMENTS_MS, setText, state } from "./common.js";
import { fmtBytes, fmtCount, fmtPct, num } from "./format.js";
import { css, emptyNote, setupCanvas } from "./charts.js";

// ------------------------------------------------------------ segments
// One row per segment; the mapped runs of one expandable reservation (the
// server lists each run as a segment, in address order) share one row that
// spans them: a lane of what is mapped (pages backed by memory) over the
// gaps that are only reserved address space, above the blocks cut from the
// runs. A pool in expandable mode has two reservations (docs/core.md
// "Placement"): the larger requests' and the region of requests of at most
// 1 MiB (small_requests), a row each, whatever lies between their addresses.
// [{expandable, small, base, end, mapped, used, runs: [segment]}]
function rowsOf(segs) {
  const rows = [];
  for (const sg of segs) {
    const base = num(sg.offset);
    const size = num(sg.size);
    const small = !!sg.small_requests;
    const last = rows.findLast((r) => r.expandable && r.small === small);
    if (sg.expandable && last && Number.isFinite(base) && base >= last.end) {
      last.runs.push(sg);
      last.end = base + size;
      last.mapped += size;
      last.used += num(sg.used);
      continue;
    }
    rows.push({ expandable: !!sg.expandable, small, base: Number.isFinite(base) ? base : 0,
      end: (Number.isFinite(base) ? base : 0) + size, mapped: size, used: num(sg.used), runs: [sg] });
  }
  return rows;
}
export function drawSegments() {
  const c = $("seg-map");
  const d = state.segs;
  const segs = d && Array.isArray(d.segments) ? d.segments : [];
  const rows = rowsOf(segs);
  // rows shrink so that up to a hundred fit the panel at once; a few are tall
  const ROW = Math.max(3, Math.min(40, Math.floor(400 / Math.max(1, rows.length)) - 2));
  const GAP = ROW >= 9 ? 4 : 1, L = 110, R = 12, T = 4;
  c.style.height = Math.max(60, T * 2 + rows.length * (ROW + GAP)) + "px";
  const { g, w, h } = setupCanvas(c);
  c.dataset.segments = String(segs.length);
  c.dataset.rows = String(rows.length);
  c.dataset.expandable = String(rows.filter((r) => r.expandable).length);
  state.segLayout = null;
  if (!d) { emptyNote(g, w, h, "waiting for data…"); return; }
  if (d.error) { emptyNote(g, w, h, d.error); setText("seg-note", ""); return; }
  if (!segs.length) { emptyNote(g, w, h, "no large segments: every block fits a size class"); setText("seg-note", ""); return; }
  let maxSpan = 1;
  for (const r of rows) maxSpan = Math.max(maxSpan, r.end - r.base);
  const scale = (w - L - R) / maxSpan;
  const lane = ROW >= 12 ? Math.max(4, Math.round(ROW * 0.28)) : 0; // the mapped lane
  state.segLayout = { ROW, GAP, L, T, scale, rows, lane };
  g.textAlign = "right";
  g.textBaseline = "middle";
  rows.forEach((r, i) => {
    const y0 = T + i * (ROW + GAP);
    const xOf = (addr) => L + (addr - r.base) * scale;
    g.fillStyle = css("--muted");
    // a label where there is room: every row when tall, else every 10th
    if (ROW >= 9 || i % 10 === 0) {
      g.fillText(fmtBytes(r.mapped) + (r.expandable ? " mapped" : ""), L - 6, y0 + (ROW >= 24 ? ROW / 2 - 7 : ROW / 2));
      if (r.expandable && ROW >= 24) g.fillText(r.small ? "≤ 1 MiB blocks" : "expandable", L - 6, y0 + ROW / 2 + 7);
    }
    if (r.expandable) {
      // the span's gaps: reserved address space without memory
      g.fillStyle = css("--unmapped");
      g.fillRect(L, y0, (r.end - r.base) * scale, ROW);
    }
    for (const sg of r.runs) {
      const a = num(sg.offset);
      const x0run = xOf(Number.isFinite(a) ? a : r.base);
      if (r.expandable && lane) {
        g.fillStyle = css("--mapped");
        g.fillRect(x0run, y0, Math.max(1, num(sg.size) * scale - 0.5), lane - 1);
      }
      let x0 = x0run;
      for (const pc of sg.pieces || []) {
        const pw = num(pc[0]) * scale;
        /* 1 in use, 2 lent to a stitched range, 0 free */
        g.fillStyle = pc[1] === 1 ? css("--large") : pc[1] === 2 ? css("--mapped") : css("--free");
        g.fillRect(x0, y0 + lane, Math.max(0.5, pw - 0.5), ROW - lane);
        x0 += pw;
      }
    }
    if (ROW >= 6) {
      g.strokeStyle = "#cbd5e1";
      g.strokeRect(L + 0.5, y0 + 0.5, (r.end - r.base) * scale - 1, ROW - 1);
    }
  });
  const free = num(d.bytes) - num(d.used_bytes);
  const exp = rows.filter((r) => r.expandable);
  setText("seg-note", fmtCount(num(d.segment_count)) + " segments · " + fmtBytes(num(d.bytes)) + " held · " +
    fmtBytes(num(d.used_bytes)) + " in use · " + fmtBytes(free) + " free (" +
    fmtPct(num(d.bytes) > 0 ? free / num(d.bytes) : 0) + ")" +
    (exp.length ? " · " + exp.length + " expandable (" + exp.reduce((n, r) => n + r.runs.length, 0) + " mapped runs)" : "") +
    (d.truncated ? " · first " + segs.length + " shown" : ""));
}
export function segTip(ev) {
  const tip = $("seg-tip");
  const m = state.segLayout;
  const c = $("seg-map");
  const rect = c.getBoundingClientRect();
  const px = ev.clientX - rect.left, py = ev.clientY - rect.top;
  const i = m ? Math.floor((py - m.T) / (m.ROW + m.GAP)) : -1;
  if (!m || i < 0 || i >= m.rows.length || px < m.L) { tip.hidden = true; return; }
  const r = m.rows[i];
  const addr = r.base + (px - m.L) / m.scale;
  let run = null, piece = null;
  for (const sg of r.runs) {
    const a = num(sg.offset);
    if (addr < a || addr >= a + num(sg.size)) continue;
    run = sg;
    let off = a;
    for (const pc of sg.pieces || []) {
      if (addr >= off && addr < off + num(pc[0])) piece = pc;
      off += num(pc[0]);
    }
  }
  const blocks = r.runs.reduce((n, sg) => n + (sg.pieces || []).filter((pc) => pc[1] === 1).length, 0);
  const lines = r.expandable
    ? ["expandable segment " + r.runs[0].id + ": " + r.runs.length + " mapped run" + (r.runs.length > 1 ? "s" : ""),
      fmtBytes(r.mapped) + " mapped over " + fmtBytes(r.end - r.base) + " of address space, " +
        fmtBytes(r.used) + " in use in " + blocks + " blocks"]
    : [(r.runs[0].stitched ? "stitched range " : "segment ") + r.runs[0].id +
        (r.runs[0].stitched ? " (free pages of other segments, mapped again here)" : ""),
      fmtBytes(r.mapped) + ", " + fmtBytes(r.used) + " in use in " + blocks + " blocks"];
  if (piece) {
    lines.push((piece[1] === 1 ? "block in use: " : piece[1] === 2 ? "lent to a stitched range: " : "free (cached): ") +
      fmtBytes(num(piece[0])));
  }
  else if (r.expandable && !run && addr < r.end) lines.push("not mapped: reserved address space, no memory behind it");
  tip.textContent = lines.join("\n");
  tip.hidden = false;
  tip.style.left = Math.min(px + 14, rect.width - 280) + "px";
  tip.style.top = (py + 12) + "px";
}
export async function fetchSegments() {
  if (state.pool === null) return;
  const pool = state.pool;
  const r = await fetch("/segments?pool=" + encodeURIComponent(pool), { cache: "no-store" });
  const d = r.ok ? await r.json() : { error: await errorText(r) };
  if (pool !== state.pool) return; // the user picked another pool meanwhile
  state.segs = d;
  drawSegments();
}
export async function pollSegments() {
  try {
    await fetchSegments();
  } catch (e) {
    /* the stats poll shows the connection state */
  } finally {
    setTimeout(pollSegments, SEGMENTS_MS);
  }
}
