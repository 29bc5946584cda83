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
 * the last out-of-memory record (/stats last_oom: request, pool, when, the
 * largest free holes, the top live sizes),
 * and edits the policy (PUT /policy with If-Match, and a bearer token when
 * one is entered).
 *
 * Shapes read: /stats {"pools": [aa_pool_stats_json ...], "policy_version",
 * "adapt"}, see docs/stats.md; /history {"snapshots", "policy_changes"}, /segments:
 * docs/http.md.
 *
 * ES modules, loaded from index.html through this one: app.js (this file:
 * the /stats poll, the pool picker, the event wiring, start), common.js
 * (state, periods, fetch helpers), format.js, charts.js (memory chart,
 * histograms), segments.js, tables.js (cards, classes, loop decisions),
 * history.js (history, policy changes, diff), policy.js (the editor),
 * urlstate.js (the view in the URL's hash: pool, range, zoom, sort).
 */
import { $, errorText, KEEP_MS, POLL_MS, RECENT_MS, setText, state } from "./common.js";
import { fmtClock, fmtUptime, num } from "./format.js";
import { drawHistogram, drawMemory, histCounts, memTip } from "./charts.js";
import { drawSegments, fetchSegments, pollSegments, segTip } from "./segments.js";
import { renderCards, renderClasses, renderLoop, renderOom } from "./tables.js";
import { pollHistory, renderChanges, renderDiff } from "./history.js";
import { applyPolicy, loadPolicy, showMsg } from "./policy.js";
import { readView, writeView } from "./urlstate.js";

// the range button lit is the one whose span the axis shows (none while zoomed
// in on a part of it: the note says what is shown)
function syncRange() {
  for (const o of document.querySelectorAll("#range button[data-range]")) {
    o.classList.toggle("on", !state.zoom && state.range !== null && Number(o.dataset.range) === state.range);
  }
  $("unzoom").hidden = !state.zoom;
}

// ------------------------------------------------------------ memory chart
// drag to zoom, double-click or "reset zoom" to unzoom, the range buttons
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
        syncRange();
        writeView();
        pollHistory(false);
      }
    }
    drawMemory();
  });
  const unzoom = () => {
    state.zoom = null;
    syncRange();
    writeView();
    pollHistory(false);
    drawMemory();
  };
  c.addEventListener("dblclick", unzoom);
  $("unzoom").addEventListener("click", unzoom);
  for (const b of document.querySelectorAll("#range button[data-range]")) {
    b.addEventListener("click", () => {
      state.range = Number(b.dataset.range);
      state.zoom = null;
      syncRange();
      writeView();
      pollHistory(false);
      drawMemory();
    });
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
  setText("updated", "updated " + fmtClock(now, true));
  renderLoop(s.adapt);
  renderOom(s && typeof s === "object" ? s.last_oom : undefined);
  const first = state.lastOk === 0; // the first answer: the segments at once
  if (state.range === null) {
    // no range in the URL: the whole run while it is under an hour (or its
    // age is not known), else 1 h
    state.range = state.uptimeMs <= 3600000 ? 0 : 3600000;
    syncRange();
    pollHistory(false);
  }
  render();
  writeView();
  if (first && state.pool !== null) fetchSegments().catch(() => {});
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

// ------------------------------------------------------------ start
function start() {
  $("pool").addEventListener("change", (ev) => {
    state.pool = ev.target.value;
    state.segs = null;
    writeView();
    render();
    drawSegments();
    fetchSegments().catch(() => {});
  });
  readView();
  syncRange();
  window.addEventListener("hashchange", () => {
    const pool = state.pool;
    readView();
    syncRange();
    if (state.pool !== pool) { state.segs = null; drawSegments(); fetchSegments().catch(() => {}); }
    render();
    pollHistory(false);
  });
  setupMemoryChart();
  $("seg-map").addEventListener("mousemove", segTip);
  $("seg-map").addEventListener("mouseleave", () => { $("seg-tip").hidden = true; });
  for (const th of $("classes").tHead.rows[0].cells) {
    th.addEventListener("click", () => {
      const k = th.dataset.key;
      state.sort = { key: k, dir: state.sort.key === k ? -state.sort.dir : k === "block" ? 1 : -1 };
      writeView();
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
