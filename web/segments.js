/*
 * segments.js — the large path's segment map (/segments for the selected
 * pool): one row per segment, its used and free pieces, a tooltip, and its
 * own poll.
 */
import { $, errorText, SEGMENTS_MS, setText, state } from "./common.js";
import { fmtBytes, fmtCount, fmtPct, num } from "./format.js";
import { css, emptyNote, setupCanvas } from "./charts.js";

// ------------------------------------------------------------ segments
export function drawSegments() {
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
export function segTip(ev) {
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
  const lines = ["segment " + sg.id + (sg.expandable ? " (expandable)" : ""),
    fmtBytes(num(sg.size)) + ", " + fmtBytes(num(sg.used)) + " in use in " +
    (sg.pieces || []).filter((pc) => pc[1]).length + " blocks"];
  if (piece) lines.push((piece[1] ? "block in use: " : "free: ") + fmtBytes(num(piece[0])));
  tip.textContent = lines.join("\n");
  tip.hidden = false;
  tip.style.left = Math.min(px + 14, rect.width - 240) + "px";
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
