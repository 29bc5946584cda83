// screenshots.mjs — the docs' pictures of the dashboard, taken from a running
// process (tools/screenshots.sh starts adaptalloc-demo for it): waits until
// the page is live and every figure has data, then writes into --out
// dashboard.png (the whole page), dashboard-memory.png, -histograms.png,
// -segments.png, -loop.png, -diff.png, and dashboard.layout.json, the page's
// structure (layout.mjs) that the browser test compares against to detect
// pictures gone stale. Read-only: it changes nothing in the process.
//
//   node tests/browser/screenshots.mjs --url http://127.0.0.1:PORT/ --out docs/img
//
// Exit 0 done, 1 failed, 77 no playwright-core or no chromium.
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { chromiumOrSkip, launch, options } from "./harness.mjs";
import { pageLayout } from "./layout.mjs";

const opt = options(process.argv.slice(2));
const url = opt("url", "");
const out = opt("out", "docs/img");
const chromiumPath = opt("chromium", process.env.CHROMIUM || "/usr/bin/chromium");
const log = (...a) => console.log("[screenshots]", ...a);

const chromium = await chromiumOrSkip(log, chromiumPath);
if (!url) {
  log("usage: --url URL [--out DIR]");
  process.exit(2);
}

const browser = await launch(chromium, chromiumPath);
let code = 0;
try {
  const page = await browser.newPage({ viewport: { width: 1440, height: 1000 } });
  await page.goto(url, { waitUntil: "load" });
  const wait = async (what, fn) => {
    try {
      await page.waitForFunction(fn, undefined, { timeout: 30000, polling: 250 });
    } catch (e) {
      throw new Error("timed out waiting for " + what);
    }
  };
  await wait("the live indicator", () => document.getElementById("conn").textContent === "live");
  await wait("the memory chart", () => Number(document.getElementById("chart-mem").dataset.points) >= 6);
  await wait("the histogram", () => Number(document.getElementById("chart-hist").dataset.bars) > 0);
  await wait("the last-minute histogram", () => Number(document.getElementById("chart-hist-recent").dataset.bars) > 0);
  await wait("the segment map", () => document.getElementById("seg-map").dataset.segments !== undefined && document.getElementById("seg-note").textContent !== "");
  await wait("the policy text", () => document.getElementById("policy-text").value.includes("pools"));
  await page.waitForTimeout(1500); // one more poll: the live points after the stored ones
  mkdirSync(out, { recursive: true });
  await page.screenshot({ path: join(out, "dashboard.png"), fullPage: true });
  const panel = (sel) => page.locator(sel).locator("xpath=ancestor::section[1]");
  await panel("#chart-mem").screenshot({ path: join(out, "dashboard-memory.png") });
  await page.locator("#chart-hist").locator("xpath=ancestor::section[1]").screenshot({ path: join(out, "dashboard-histograms.png") });
  await panel("#seg-map").screenshot({ path: join(out, "dashboard-segments.png") });
  await panel("#loop").screenshot({ path: join(out, "dashboard-loop.png") });
  // the diff of the policy loop's first change, when it made one
  await page.evaluate(() => {
    const rows = Array.from(document.querySelectorAll("#changes tbody tr"));
    const loop = rows.reverse().find((tr) => tr.cells[1] && tr.cells[1].textContent === "loop");
    if (loop) loop.click();
  });
  await page.waitForTimeout(300);
  await panel("#diff").screenshot({ path: join(out, "dashboard-diff.png") });
  const layout = await pageLayout(page);
  const facts = await page.evaluate(() => ({
    pool: document.getElementById("pool").value,
    classes: document.querySelectorAll("#classes tbody tr").length,
    segments: Number(document.getElementById("seg-map").dataset.segments),
    changes: document.querySelectorAll("#changes tbody tr[data-to]").length,
    loop_rows: document.querySelectorAll("#loop tbody tr").length,
  }));
  writeFileSync(join(out, "dashboard.layout.json"), JSON.stringify({
    note: "written by tools/screenshots.sh with the pictures beside it; the browser test compares the page's structure (cards, range buttons, panels: heading, legend, figures, columns) against 'layout'",
    layout, shown: facts,
  }, null, 2) + "\n");
  log("wrote", out, JSON.stringify(facts));
} catch (e) {
  log("FAIL:", e.message);
  code = 1;
} finally {
  await browser.close().catch(() => {});
}
process.exit(code);
