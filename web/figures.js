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

// A loop decision's measured effect in the prediction's scope. The
// prediction replays the interval's small requests, so it covers the small
// classes only; the measurement is the small classes' reserved bytes
// (measured.small_reserved_*) when the server gives them, else (an older
// server) the whole pool's, said so in scope.
// -> {delta, before, after, scope: "small" | "pool"} or null
export function measuredEffect(m) {
  if (!m || typeof m !== "object") return null;
  const small = typeof m.small_reserved_before === "number" && typeof m.small_reserved_after === "number";
  const b = small ? m.small_reserved_before : m.reserved_before;
  const a = small ? m.small_reserved_after : m.reserved_after;
  if (typeof a !== "number" || typeof b !== "number") return null;
  return { delta: a - b, before: b, after: a, scope: small ? "small" : "pool" };
}

// The prediction's effect: the replayed peak reserved after minus before.
// -> {delta, before, after} or null
export function predictedEffect(p) {
  if (!p || typeof p !== "object") return null;
  const b = p.peak_reserved_before, a = p.peak_reserved_after;
  if (typeof a !== "number" || typeof b !== "number") return null;
  return { delta: a - b, before: b, after: a };
}
