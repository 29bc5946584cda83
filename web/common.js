/*
 * common.js — what every part of the dashboard shares: the polling periods,
 * the page's state (one object; modules change its fields, never replace
 * it), the element lookup, and the fetch helpers (the bearer token header,
 * a failed answer's error text).
 */

export const POLL_MS = 1000;
export const HISTORY_MS = 5000;
export const SEGMENTS_MS = 5000;
export const KEEP_MS = 5 * 60 * 1000;   // live points kept (history covers the rest)
export const RECENT_MS = 60 * 1000;     // the recent-window histogram
export const MEM_POINTS = 1000;         // points asked of /history over any range

export const $ = (id) => document.getElementById(id);
export const state = {
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
  range: null,         // ms shown, 0 = the whole run; null until the URL or the
                       // first /stats decides (the whole run up to an hour, else 1 h)
  historyOff: null,    // why /history has nothing (the store is off: 503), or null
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

// ------------------------------------------------------------ fetch
export function authHeaders() {
  const t = $("token").value.trim();
  return t ? { Authorization: "Bearer " + t } : {};
}
export async function errorText(r) {
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

// ------------------------------------------------------------ text
export function setText(id, text) {
  const el = $(id);
  if (el.textContent !== text) el.textContent = text;
}
