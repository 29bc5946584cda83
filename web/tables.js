/*
 * tables.js — the selected pool's cards and size-class table (sortable),
 * the last out-of-memory card (/stats last_oom), and the policy loop's
 * decisions (/stats adapt.audit).
 */
import { $, setText, state } from "./common.js";
import { largePlacement, measuredEffect, predictedEffect, smallWaste } from "./figures.js";
import { fmtBytes, fmtClock, fmtCount, fmtDeltaMiB, fmtPct, num } from "./format.js";

export function renderCards(p) {
  setText("c-inuse", fmtBytes(num(p.bytes_in_use)));
  setText("c-inuse-s", "peak " + fmtBytes(num(p.peak_bytes_in_use)));
  setText("c-reserved", fmtBytes(num(p.bytes_reserved)));
  const lim = num(p.limit_bytes);
  setText("c-reserved-s", "peak " + fmtBytes(num(p.peak_bytes_reserved)) + (lim ? " · limit " + fmtBytes(lim) : ""));
  const small = num(p.bytes_in_use) - num(p.large_bytes_in_use);
  /* the small classes' waste, as the class table's rows compute theirs */
  const w = smallWaste(p);
  setText("c-waste", fmtPct(w.frac));
  setText("c-waste-s", fmtBytes(w.wasted) + " of " + fmtBytes(w.inUse) + " in the classes lost to rounding up" +
    (w.largeWasted > 0 ? " · large path " + fmtBytes(w.largeWasted) : ""));
  /* two figures, each named: overall (every allocation; a small one that
   * carved a slab and a large one that called the backend are misses) and
   * small-path (small allocations only); docs/stats.md defines both */
  const pct = (v) => (v === null || v === undefined ? "–" : fmtPct(num(v)));
  setText("c-hit", "overall " + pct(p.overall_hit_rate));
  setText("c-hit-s", "small-path " + pct(p.small_hit_rate) + " of " +
    fmtCount(num(p.cache_hits) + num(p.cache_misses)) + " small · " +
    fmtCount(num(p.large_allocs)) + " large, " + fmtCount(num(p.large_misses)) +
    " called the backend · " + fmtCount(num(p.backend_allocs)) + " backend allocs");
  const rate = state.rate.get(p.name);
  setText("c-rate", rate === undefined ? fmtCount(num(p.allocs)) : fmtCount(rate) + "/s");
  setText("c-rate-s", fmtCount(num(p.allocs)) + " total · " + fmtCount(num(p.ooms)) + " OOM");
  const cls = p.classes || [];
  setText("c-classes", String(num(p.class_count) || cls.length));
  setText("c-classes-s", "small " + fmtBytes(small) + " · large " + fmtBytes(num(p.large_bytes_in_use)));
  /* the large path's placement: utilisation, the learned plan, stitching */
  const lp = largePlacement(p);
  setText("c-place", lp.util === null ? "–" : fmtPct(lp.util) + " used");
  setText("c-place-s", "peak in use / peak reserved · plan " + lp.state +
    (lp.hitRate === null ? "" : ", " + fmtPct(lp.hitRate) + " of its requests served") +
    (lp.arena > 0 ? ", arena " + fmtBytes(lp.arena) + ", saves " + fmtBytes(lp.saved) : "") +
    " (" + fmtCount(lp.adopted) + " adopted, " + fmtCount(lp.dropped) + " dropped, " +
    fmtCount(lp.refused) + " refused) · " + fmtCount(lp.stitched) + " stitched ranges");
}

// "2 × 4 MiB, 200 × 4 KiB" from [{size, count}]; "none" when empty
function sizesText(list, max) {
  const a = Array.isArray(list) ? list.slice(0, max) : [];
  if (!a.length) return "none";
  return a.map((e) => (num(e.count) === 1 ? "" : fmtCount(num(e.count)) + " × ") + fmtBytes(num(e.size))).join(", ");
}

// "3 min ago": how long before now a Unix time in ms was
function ago(ms) {
  const s = Math.max(0, (Date.now() - ms) / 1000);
  if (s < 60) return Math.floor(s) + " s ago";
  if (s < 3600) return Math.floor(s / 60) + " min ago";
  if (s < 86400) return Math.floor(s / 3600) + " h ago";
  return Math.floor(s / 86400) + " d ago";
}

/* The last out-of-memory record of the process (/stats' last_oom, the
 * record GET /oom serves; docs/stats.md): the request and its pool, when,
 * the pool's figures, the largest free holes, the live sizes holding the
 * most bytes, the segments and the most requested sizes. null: none yet. */
export function renderOom(rec) {
  const card = $("oom");
  if (rec === undefined) {
    // a server whose /stats has no last_oom (not the runtime's)
    card.dataset.state = "none";
    setText("oom-v", "–");
    setText("oom-s", "this server does not report out-of-memory records (GET /oom)");
    $("oom-d").hidden = true;
    return;
  }
  if (rec === null || typeof rec !== "object") {
    card.dataset.state = "none";
    setText("oom-v", "none");
    setText("oom-s", "no allocation has failed since the process started");
    $("oom-d").hidden = true;
    return;
  }
  card.dataset.state = "oom";
  setText("oom-v", fmtBytes(num(rec.request)) + " on " + String(rec.pool || "?"));
  const lim = num(rec.limit_bytes);
  setText("oom-s", fmtClock(num(rec.unix_ms), true) + " (" + ago(num(rec.unix_ms)) + ") · " +
    fmtCount(num(rec.count)) + " failed in this pool · reserved " + fmtBytes(num(rec.bytes_reserved)) +
    (lim ? " of a " + fmtBytes(lim) + " limit" : "") + " · in use " + fmtBytes(num(rec.bytes_in_use)));
  const holes = Array.isArray(rec.holes) ? rec.holes : [];
  setText("oom-holes", holes.length
    ? holes.slice(0, 5).map((h) => fmtBytes(num(h))).join(", ") + " (" + fmtBytes(num(rec.large_bytes_free)) + " free in all)"
    : "none (no free block on the large path)");
  setText("oom-live", sizesText(rec.live_sizes, 5));
  setText("oom-segs", fmtCount(num(rec.segments)) + " (" + fmtCount(num(rec.slabs)) + " slabs of " +
    fmtBytes(num(rec.slab_size)) + "; large: " + sizesText(rec.segment_sizes, 4) + ")");
  setText("oom-top", sizesText(rec.top_sizes, 5));
  $("oom-d").hidden = false;
}

export function renderClasses(p) {
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

// ------------------------------------------------------------ loop decisions
// /stats adapt: {"enabled", "steps", "rejected_by_replay", "audit": [{pool,
// step, kind, block_size, applied, released (trim), predicted:
// {peak_reserved_before, peak_reserved_after, ...} | null, measured:
// {reserved_before, reserved_after, small_reserved_before,
// small_reserved_after, small_requested_before, small_requested_after,
// after_steps} | null}]} (docs/stats.md); the prediction covers the small
// classes with the demand held fixed, so the measured column shows their
// reserved net of the demand's change (figures.js measuredEffect); a trim's size column shows the bytes it gave back
const LOOP_ROWS = 64;
function deltaCell(tr, d, title) {
  const td = tr.insertCell(-1);
  td.textContent = fmtDeltaMiB(d);
  td.className = d === null ? "muted" : d < 0 ? "gain" : d > 0 ? "loss" : "";
  if (title) td.title = title;
}
export function renderLoop(a) {
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
  if (!list.length) { empty("no class-table changes or trims yet"); return; }
  const rows = list.slice().sort((x, y) => num(y.step) - num(x.step) || (x.pool < y.pool ? -1 : 1));
  tb.textContent = "";
  for (const e of rows.slice(0, LOOP_ROWS)) {
    const tr = tb.insertRow(-1);
    const ago = steps >= num(e.step) ? steps - num(e.step) : null;
    const stepTd = tr.insertCell(-1);
    stepTd.textContent = String(num(e.step));
    if (ago !== null) stepTd.title = ago + " steps ago";
    tr.insertCell(-1).textContent = e.pool;
    const trim = e.kind === "trim";
    tr.insertCell(-1).textContent = e.kind === "add_class" ? "add" : e.kind === "retire_class" ? "retire" : String(e.kind);
    const size = tr.insertCell(-1);
    size.textContent = fmtBytes(num(trim ? e.released : e.block_size));
    if (trim) size.title = "given back by the trim";
    const res = tr.insertCell(-1);
    res.textContent = e.applied === true ? "applied" : "rejected";
    res.className = e.applied === true ? "gain" : "loss";
    if (e.applied !== true) res.title = "not applied: the replay of the interval predicted no gain";
    const p = e.predicted;
    const pe = predictedEffect(p);
    deltaCell(tr, pe ? pe.delta : null,
      p ? fmtBytes(num(p.peak_reserved_before)) + " → " + fmtBytes(num(p.peak_reserved_after)) +
        ", backend calls " + fmtCount(num(p.backend_calls_before)) + " → " + fmtCount(num(p.backend_calls_after))
        : trim ? "a trim is not replayed" : "nothing was replayed");
    const m = e.measured;
    const me = measuredEffect(m);
    deltaCell(tr, me ? me.delta : null,
      me ? (me.scope === "small" ? "small classes' reserved " : "the pool's reserved (this server gives no small-class figure) ") +
        fmtBytes(me.before) + " → " + fmtBytes(me.after) + " after " + num(m.after_steps) + " steps" +
        (me.demandDelta !== null ? (me.demandDelta > 0 ? ", less the demand's growth" : "; the demand did not grow") +
          " (bytes asked for " + fmtBytes(num(m.small_requested_before)) + " → " +
          fmtBytes(num(m.small_requested_after)) + "; the prediction holds it fixed)" : "") +
        (me.scope === "small" ? "; the whole pool's " + fmtBytes(num(m.reserved_before)) + " → " +
          fmtBytes(num(m.reserved_after)) + " (the large path is not predicted)" : "")
        : e.applied === true ? "measured 3 steps after the change" : "not applied");
    if (e.applied !== true) tr.className = "rejected";
  }
}
