/*
 * figures.js — the figures the cards and the loop panel compute from /stats,
 * kept apart from the page (no DOM) so that node tests them
 * (tests/web/figures.test.mjs): each compares like with like.
 */
import { num } from "./format.js";

// The small classes' internal waste, summed over the rows of the class
// table the way each row computes its own (a class's in-use block bytes
// less the bytes asked for, never below 0), so the card is the in-use
// weighted mean of the rows beside it. The large path is not in it (its
// rounding is to pages, not classes): its bytes are given apart.
// -> {wasted, inUse, frac, largeWasted}
export function smallWaste(p) {
  let wasted = 0, inUse = 0, requested = 0;
  for (const k of (p && p.classes) || []) {
    const u = num(k.bytes_in_use);
    inUse += u;
    requested += num(k.bytes_requested);
    wasted += Math.max(0, u - num(k.bytes_requested));
  }
  // what the pool's totals leave for the large path
  const largeUse = num(p && p.large_bytes_in_use);
  const largeReq = num(p && p.bytes_requested) - requested;
  const largeWasted = largeUse > 0 ? Math.max(0, largeUse - Math.max(0, largeReq)) : 0;
  return { wasted, inUse, frac: inUse > 0 ? wasted / inUse : 0, largeWasted };
}

// A loop decision's measured effect, compared like with like. The
// prediction replays the interval's small requests under the table before
// and after the change: the small classes only, the demand held fixed. So
// the measurement is the small classes' reserved bytes
// (measured.small_reserved_*), less what the demand's growth needed (the
// bytes their live blocks asked for, measured.small_requested_*, when they
// grew): more tensors 3 steps later are not the change's cost. A demand that
// fell is not credited: a pool keeps its slabs when demand falls (until a
// trim), so the reserved bytes do not follow it down, whatever the change
// did. An older server without the small figures: the whole pool's
// reserved, said so in scope.
// -> {delta, before, after, reservedDelta, demandDelta, scope: "small" | "pool"} or null
export function measuredEffect(m) {
  if (!m || typeof m !== "object") return null;
  const isNum = (v) => typeof v === "number" && isFinite(v);
  const small = isNum(m.small_reserved_before) && isNum(m.small_reserved_after);
  const b = small ? m.small_reserved_before : m.reserved_before;
  const a = small ? m.small_reserved_after : m.reserved_after;
  if (!isNum(a) || !isNum(b)) return null;
  const demand = small && isNum(m.small_requested_before) && isNum(m.small_requested_after)
    ? m.small_requested_after - m.small_requested_before : null;
  return {
    delta: a - b - (demand === null ? 0 : Math.max(0, demand)), before: b, after: a,
    reservedDelta: a - b, demandDelta: demand, scope: small ? "small" : "pool",
  };
}

// The prediction's effect: the replayed peak reserved after minus before.
// -> {delta, before, after} or null
export function predictedEffect(p) {
  if (!p || typeof p !== "object") return null;
  const b = p.peak_reserved_before, a = p.peak_reserved_after;
  if (typeof a !== "number" || typeof b !== "number") return null;
  return { delta: a - b, before: b, after: a };
}

// The large path's placement (docs/core.md "The learned plan" and
// "Stitching"): the plan's state in words, its hit rate over the requests it
// saw (hits / (hits + misses); null before any), its arena and the peak
// reserved it saves by the replay it was adopted on; utilisation, peak in
// use over peak reserved (null before any reservation); stitched ranges.
// -> {state, hitRate, arena, saved, adopted, dropped, refused, util, stitched}
const PLAN_STATES = ["off", "learning", "waiting for the period", "active", "draining"];
export function largePlacement(p) {
  const hits = num(p.large_plan_hits), misses = num(p.large_plan_misses);
  const reserved = num(p.peak_bytes_reserved);
  return {
    state: PLAN_STATES[num(p.large_plan_state)] || "off",
    hitRate: hits + misses > 0 ? hits / (hits + misses) : null,
    arena: num(p.large_plan_bytes),
    saved: num(p.large_plan_saved_bytes),
    adopted: num(p.large_plans_adopted),
    dropped: num(p.large_plans_dropped),
    refused: num(p.large_plans_refused),
    util: reserved > 0 ? num(p.peak_bytes_in_use) / reserved : null,
    stitched: num(p.large_stitched_ranges),
  };
}
