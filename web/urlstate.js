/*
 * urlstate.js — the view in the URL's hash, so that a view can be shared and
 * a reload keeps it: #pool=<name>&range=<5m|1h|6h|24h|run>&zoom=<t0>-<t1>
 * &sort=<column>.<asc|desc>. readView() reads the hash into the page's state
 * (unknown or malformed parts are ignored, the rest kept); writeView() writes
 * the state back with history.replaceState (no new history entry per click).
 */
import { state } from "./common.js";

const RANGES = { "5m": 300000, "1h": 3600000, "6h": 21600000, "24h": 86400000, run: 0 };
const SORT_KEYS = ["block", "slabs", "inUse", "reserved", "hits", "misses", "hitRate", "waste"];

export function rangeName(ms) {
  for (const [k, v] of Object.entries(RANGES)) if (v === ms) return k;
  return null;
}

// the view from the hash; returns the names it understood
export function readView() {
  const got = [];
  const q = new URLSearchParams(location.hash.replace(/^#/, ""));
  const pool = q.get("pool");
  if (pool) { state.pool = pool; got.push("pool"); }
  const range = q.get("range");
  if (range !== null && Object.prototype.hasOwnProperty.call(RANGES, range)) {
    state.range = RANGES[range];
    got.push("range");
  }
  const zoom = /^(\d+)-(\d+)$/.exec(q.get("zoom") || "");
  if (zoom && Number(zoom[2]) - Number(zoom[1]) >= 2000) {
    state.zoom = { t0: Number(zoom[1]), t1: Number(zoom[2]) };
    got.push("zoom");
  } else if (q.has("zoom") || !zoom) {
    state.zoom = null;
  }
  const sort = /^(\w+)\.(asc|desc)$/.exec(q.get("sort") || "");
  if (sort && SORT_KEYS.includes(sort[1])) {
    state.sort = { key: sort[1], dir: sort[2] === "asc" ? 1 : -1 };
    got.push("sort");
  }
  return got;
}

export function writeView() {
  const q = new URLSearchParams();
  if (state.pool !== null) q.set("pool", state.pool);
  const r = rangeName(state.range);
  if (r !== null) q.set("range", r);
  if (state.zoom) q.set("zoom", Math.round(state.zoom.t0) + "-" + Math.round(state.zoom.t1));
  q.set("sort", state.sort.key + "." + (state.sort.dir > 0 ? "asc" : "desc"));
  const hash = "#" + q.toString();
  if (location.hash !== hash) history.replaceState(null, "", hash);
}
