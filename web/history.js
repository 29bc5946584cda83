/*
 * history.js — what the store remembers (/history): the stored memory
 * points, the policy changes and their table, and the diff between any two
 * policy versions (/history?policies=1).
 */
import { $, errorText, HISTORY_MS, MEM_POINTS, setText, state } from "./common.js";
import { fmtClock, num } from "./format.js";
import { drawMemory } from "./charts.js";

// ------------------------------------------------------------ history
function changeTime(e) {
  if (typeof e.ts_ms === "number") return e.ts_ms;
  if (typeof e.time_ms === "number") return e.time_ms;
  if (typeof e.time_ns === "number") return e.time_ns / 1e6;
  if (typeof e.time === "number") return e.time > 1e12 ? e.time : e.time * 1000;
  return null;
}
export function renderChanges(note) {
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
export async function pollHistory(again) {
  try {
    // about MEM_POINTS points over what is shown, thinned by the server
    const now = Date.now();
    let since = 0, span;
    if (state.zoom) { since = Math.floor(state.zoom.t0); span = state.zoom.t1 - state.zoom.t0; }
    else if (state.range > 0) { since = now - state.range; span = state.range; }
    else if (state.range === 0) span = Math.max(60000, state.uptimeMs);
    else return; // the range is not decided yet (first /stats)
    const step = Math.max(1000, Math.floor(span / MEM_POINTS));
    const r = await fetch("/history?limit=10000&policies=1&step=" + step + (since > 0 ? "&since=" + since : ""), { cache: "no-store" });
    if (r.status === 503) {
      state.changes = [];
      state.stored = new Map();
      state.historyOff = await errorText(r);
      renderChanges("the store is off: no history (" + state.historyOff + "); set ADAPTALLOC_DB=<file> to keep it");
      renderDiffPickers();
      renderDiff();
      drawMemory();
    } else if (!r.ok) {
      state.changes = [];
      renderChanges(await errorText(r));
    } else {
      state.historyOff = null;
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
export function renderDiff() {
  const pre = $("diff");
  const docs = withDocs();
  const from = Number($("diff-from").value), to = Number($("diff-to").value);
  pre.textContent = "";
  pre.dataset.added = "0";
  pre.dataset.removed = "0";
  if (!docs.size) {
    const sp = document.createElement("span");
    sp.className = "muted";
    sp.textContent = state.historyOff ? "the store is off: no policy documents to compare (ADAPTALLOC_DB=<file> keeps them)"
      : "no policy documents in the store for this range";
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
