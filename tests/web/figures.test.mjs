// tests/web/figures.test.mjs — the dashboard's figures (web/figures.js)
// compare like with like, without a browser: node's own test runner.
//   node --test tests/web/figures.test.mjs
import { test } from "node:test";
import assert from "node:assert/strict";
import { largePlacement, measuredEffect, predictedEffect, smallWaste } from "../../web/figures.js";

const MiB = 1048576, KiB = 1024;

test("loop panel: measured is the small classes' reserved, the prediction's scope", () => {
  // the case: add 10 KiB; replay of the small requests predicts
  // -1.08 MiB; the pool grew 10 MiB on the large path (a sequence change)
  // while the small classes shrank by about what was predicted
  const e = {
    kind: "add_class", block_size: 10 * KiB, applied: true,
    predicted: { peak_reserved_before: 28 * MiB, peak_reserved_after: 28 * MiB - 1.08 * MiB },
    measured: {
      reserved_before: 382 * MiB, reserved_after: 392 * MiB,
      small_reserved_before: 28 * MiB, small_reserved_after: 27 * MiB, after_steps: 3,
    },
  };
  const p = predictedEffect(e.predicted), m = measuredEffect(e.measured);
  assert.equal(m.scope, "small");
  assert.equal(m.delta, -1 * MiB); // not +10 MiB
  assert.equal(m.demandDelta, null); // no demand figures: the reserved change as it is
  assert.ok(p.delta < 0 && m.delta < 0, "both are gains: the panel shows no red for this change");
  assert.equal(m.before, 28 * MiB);
});

test("loop panel: measured is net of the demand's growth, which the prediction holds fixed", () => {
  // 3 steps after an add, the small classes hold 14 MiB more because the
  // workload asks for 15.5 MiB more (a longer sequence): not the change's cost
  const m = measuredEffect({
    reserved_before: 300 * MiB, reserved_after: 330 * MiB,
    small_reserved_before: 40 * MiB, small_reserved_after: 54 * MiB,
    small_requested_before: 30 * MiB, small_requested_after: 45.5 * MiB, after_steps: 3,
  });
  assert.equal(m.reservedDelta, 14 * MiB);
  assert.equal(m.demandDelta, 15.5 * MiB);
  assert.equal(m.delta, -1.5 * MiB);
  // a demand that fell is not credited: the pool keeps its slabs
  const fell = measuredEffect({
    reserved_before: 0, reserved_after: 0, small_reserved_before: 60 * MiB,
    small_reserved_after: 62 * MiB, small_requested_before: 40 * MiB, small_requested_after: 20 * MiB,
  });
  assert.equal(fell.delta, 2 * MiB);
  assert.equal(fell.demandDelta, -20 * MiB);
  // the same demand: the reserved change itself
  const same = measuredEffect({
    reserved_before: 0, reserved_after: 0, small_reserved_before: 10 * MiB,
    small_reserved_after: 12 * MiB, small_requested_before: 5 * MiB, small_requested_after: 5 * MiB,
  });
  assert.equal(same.delta, 2 * MiB);
});

test("loop panel: an older server without small figures falls back to the pool, said so", () => {
  const m = measuredEffect({ reserved_before: 8 * MiB, reserved_after: 7 * MiB, after_steps: 3 });
  assert.deepEqual(m, { delta: -1 * MiB, before: 8 * MiB, after: 7 * MiB, reservedDelta: -1 * MiB,
    demandDelta: null, scope: "pool" });
  assert.equal(measuredEffect(null), null);
  assert.equal(measuredEffect({ reserved_before: 1 }), null);
  assert.equal(predictedEffect(null), null);
});

test("internal waste card: the in-use weighted mean of the class rows", () => {
  const pool = {
    bytes_in_use: 100 * MiB + 10 * KiB, // small classes + a large block
    bytes_requested: 90 * MiB + 8 * KiB,
    large_bytes_in_use: 64 * MiB,
    classes: [
      { block_size: 4096, bytes_in_use: 16 * MiB, bytes_requested: 12 * MiB },
      { block_size: 3072, bytes_in_use: 20 * MiB + 10 * KiB, bytes_requested: 20 * MiB + 8 * KiB },
      { block_size: 8192, bytes_in_use: 0, bytes_requested: 0 },
      // a row's waste is never below 0, the card's sum neither
      { block_size: 512, bytes_in_use: 0, bytes_requested: 100 },
    ],
  };
  const w = smallWaste(pool);
  // the rows' own figures, as tables.js computes them
  let wasted = 0, inUse = 0;
  for (const k of pool.classes) {
    const u = k.bytes_in_use;
    const rowWaste = u > 0 ? Math.max(0, (u - k.bytes_requested) / u) : 0;
    wasted += rowWaste * u;
    inUse += u;
  }
  assert.equal(w.inUse, inUse);
  assert.ok(Math.abs(w.wasted - wasted) < 1e-6);
  assert.ok(Math.abs(w.frac - wasted / inUse) < 1e-12);
  // between the smallest and the largest row's waste
  assert.ok(w.frac >= 0 && w.frac <= 0.25);
  // the large path's rounding is given apart, not in the card's fraction
  assert.equal(w.largeWasted, 64 * MiB - (90 * MiB + 8 * KiB - (32 * MiB + 8 * KiB + 100)));
  assert.deepEqual(smallWaste({}), { wasted: 0, inUse: 0, frac: 0, largeWasted: 0 });
});

test("largePlacement: the plan's state, hit rate, arena and savings; utilisation", () => {
  const MiB = 1 << 20;
  const f = largePlacement({
    large_plan_state: 3, large_plan_hits: 90, large_plan_misses: 10,
    large_plan_bytes: 512 * MiB, large_plan_saved_bytes: 64 * MiB,
    large_plans_adopted: 1, large_plans_dropped: 0, large_plans_refused: 2,
    peak_bytes_in_use: 900 * MiB, peak_bytes_reserved: 1000 * MiB, large_stitched_ranges: 3,
  });
  assert.equal(f.state, "active");
  assert.ok(Math.abs(f.hitRate - 0.9) < 1e-12);
  assert.equal(f.arena, 512 * MiB);
  assert.equal(f.saved, 64 * MiB);
  assert.equal(f.refused, 2);
  assert.ok(Math.abs(f.util - 0.9) < 1e-12);
  assert.equal(f.stitched, 3);
  // a pool without the plan (an older server): off, no rate, no utilisation
  const z = largePlacement({});
  assert.equal(z.state, "off");
  assert.equal(z.hitRate, null);
  assert.equal(z.util, null);
  assert.equal(largePlacement({ large_plan_state: 9 }).state, "off");
});
