// dashboard.test.mjs — the dashboard in headless Chromium (playwright-core
// driving Debian's /usr/bin/chromium): the page loads and goes live; the
// memory chart draws the stored history with a policy-change marker, shows a
// tooltip and zooms; both histograms (since start, last minute) and the
// large-segment map draw data; the loop-decisions table lists the policy
// loop's audit (predicted and measured effect); the class table sorts; a policy edit without
// the token is refused with the server's message, a valid edit takes effect
// (the version bumps) and shows in the diff view, an invalid one shows the
// validator's error and changes nothing, an incomplete one is refused naming
// what it leaves out; the last out-of-memory card shows its empty state,
// then (the server fails a request when told on stdin) the request, the
// pool, when, the largest free holes and the top live sizes, as GET /oom
// serves them; the range button lit is the axis'
// span, the view (pool, range, sort) lives in the URL's hash and survives a
// reload; /favicon.ico answers; with the store off (a second server,
// --no-store) the chart, the change list and the diff say so and how to turn
// it on; the page's structure is the one recorded beside the docs' pictures
// (docs/img/dashboard.layout.json, written with them from the real demo by
// tools/screenshots.sh), else the pictures are stale. Saves a screenshot,
// <out>/dashboard.png.
//
//   node tests/browser/dashboard.test.mjs --server build/tests/aa_http_testserver \
//        --out build/browser
//   node tests/browser/dashboard.test.mjs --url http://127.0.0.1:9100/ --token T
//
// --server starts that program (aa_http_testserver or anything that prints
// "PORT <n>" and accepts --token and --watch-stdin); --url uses a running
// server (adaptalloc-demo, say; with no ADAPTALLOC_TOKEN it made a token:
// pass --token "$(cat <the file its start-up line names>)"). Exit 0 pass,
// 1 fail, 77 skipped (no playwright-core or no chromium).
import { spawn } from "node:child_process";
import { mkdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { chromiumOrSkip, launch, options } from "./harness.mjs";
import { layoutDiff, pageLayout } from "./layout.mjs";

const opt = options(process.argv.slice(2));
const serverBin = opt("server", process.env.AA_TESTSERVER || "");
let baseUrl = opt("url", process.env.AA_DASHBOARD_URL || "");
const outDir = opt("out", process.env.AA_TEST_BINARY_DIR ? join(process.env.AA_TEST_BINARY_DIR, "browser") : "build-browser");
const chromiumPath = opt("chromium", process.env.CHROMIUM || "/usr/bin/chromium");
const token = opt("token", serverBin ? "browser-test-token" : process.env.ADAPTALLOC_TOKEN || "");

function log(...a) { console.log("[dashboard]", ...a); }
function fail(msg) { throw new Error(msg); }

const chromium = await chromiumOrSkip(log, chromiumPath);
if (!serverBin && !baseUrl) {
  log("usage: --server PROGRAM | --url URL");
  process.exit(2);
}

let server = null;
let server2 = null; // --no-store, for the empty states
let browser = null;
const watchdog = setTimeout(() => { log("FAIL: timed out"); cleanup(); process.exit(1); }, 120000);

function cleanup() {
  for (const s of [server, server2]) if (s && s.exitCode === null) s.kill("SIGTERM");
}

async function startServer(extra = []) {
  const argv = ["--watch-stdin", ...extra];
  if (token) argv.push("--token", token);
  const proc = spawn(serverBin, argv, { stdio: ["pipe", "pipe", "inherit"] });
  if (extra.length) server2 = proc; else server = proc;
  return await new Promise((resolve, reject) => {
    let buf = "";
    proc.stdout.on("data", (d) => {
      buf += d.toString();
      const m = buf.match(/PORT (\d+)/);
      if (m) resolve(`http://127.0.0.1:${m[1]}/`);
    });
    proc.on("exit", (code) => reject(new Error("server exited early with " + code)));
    proc.on("error", reject);
  });
}

async function until(page, what, fn, arg, timeout = 20000) {
  try {
    await page.waitForFunction(fn, arg, { timeout, polling: 200 });
  } catch (e) {
    fail("timed out waiting for " + what);
  }
}

async function main() {
  if (serverBin) baseUrl = await startServer();
  log("dashboard at", baseUrl);
  browser = await launch(chromium, chromiumPath);
  const page = await browser.newPage({ viewport: { width: 1440, height: 1000 } });
  const consoleErrors = [];
  // refused requests (401, 400) are logged by Chromium as "Failed to load
  // resource"; those are expected here, anything else is a bug in web/*.js
  page.on("console", (m) => {
    if (m.type() === "error" && !/Failed to load resource/.test(m.text())) consoleErrors.push(m.text());
  });
  page.on("pageerror", (e) => consoleErrors.push(String(e)));

  // 1. the page loads and goes live
  const resp = await page.goto(baseUrl, { waitUntil: "load" });
  if (!resp || resp.status() !== 200) fail("GET / answered " + (resp && resp.status()));
  if ((await page.title()) !== "adaptalloc") fail("unexpected title " + (await page.title()));
  await until(page, "the live indicator", () => document.getElementById("conn").textContent === "live");

  // 1a. the docs' pictures are of this page: its structure (cards, range
  //     buttons, each panel's heading, legend, figures and table columns;
  //     not the values) is the one recorded beside them by
  //     tools/screenshots.sh (docs/img/dashboard.layout.json)
  const recorded = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "docs", "img", "dashboard.layout.json");
  const drift = layoutDiff(JSON.parse(readFileSync(recorded, "utf8")).layout, await pageLayout(page));
  if (drift.length) {
    fail("docs/img/dashboard*.png are stale (the page changed since they were taken): " + drift.join("; ") +
      " — run bash tools/screenshots.sh BUILD_DIR and commit docs/img");
  }

  // 1b. a region's pool is in the pool picker, named as one
  if (serverBin) {
    await until(page, "the region's pool in the picker", () =>
      Array.from(document.getElementById("pool").options).some((o) =>
        o.value === "device0:kv_cache" && /region kv_cache/.test(o.textContent)));
  }

  // 1c. the last out-of-memory card: before any, its empty state says so;
  //     then (our server: the line "oom" on its stdin makes pool host fail a
  //     1 PiB request) it shows the request, the pool, when, the largest
  //     free holes and the top live sizes, red, and GET /oom serves the same
  //     record. Against a live process only the empty or filled state is
  //     checked for its text.
  await until(page, "the OOM card", () => ["none", "oom"].includes(document.getElementById("oom").dataset.state));
  const oom0 = await page.evaluate(() => ({ state: document.getElementById("oom").dataset.state,
    v: document.getElementById("oom-v").textContent, s: document.getElementById("oom-s").textContent,
    detail: !document.getElementById("oom-d").hidden }));
  if (serverBin || oom0.state === "none") {
    if (oom0.state !== "none" || oom0.v !== "none" || !/no allocation has failed/.test(oom0.s) || oom0.detail) {
      fail("the OOM card's empty state: " + JSON.stringify(oom0));
    }
  }
  if (serverBin) {
    server.stdin.write("oom\n");
    await until(page, "the OOM card to fill", () => document.getElementById("oom").dataset.state === "oom");
    const oom = await page.evaluate(() => {
      const t = (id) => document.getElementById(id).textContent;
      return { v: t("oom-v"), s: t("oom-s"), holes: t("oom-holes"), live: t("oom-live"), segs: t("oom-segs"),
        shown: !document.getElementById("oom-d").hidden,
        border: getComputedStyle(document.getElementById("oom")).borderTopColor };
    });
    log("OOM card:", JSON.stringify(oom));
    if (oom.v !== "1 PiB on host") fail("the OOM card's request and pool: " + oom.v);
    if (!/\d\d:\d\d:\d\d \(\d+ s ago\) · 1 failed in this pool · reserved /.test(oom.s)) fail("the OOM card's when: " + oom.s);
    if (!oom.shown) fail("the OOM card hides its details");
    // pool host keeps 16 resident 1 MiB blocks live (testserver.c), so the
    // live sizes list them and the large path has segments
    if (!/16 × 1 MiB/.test(oom.live)) fail("the OOM card's top live sizes: " + oom.live);
    if (!/free in all\)$|^none \(no free block/.test(oom.holes)) fail("the OOM card's holes: " + oom.holes);
    if (!/slabs of .*; large: /.test(oom.segs)) fail("the OOM card's segments: " + oom.segs);
    if (oom.border !== "rgb(185, 28, 28)") fail("the OOM card is not marked: " + oom.border);
    const served = await page.evaluate(async () => (await fetch("/oom")).json());
    if (served.count !== 1 || !served.last || served.last.pool !== "host" || served.last.request !== 2 ** 50 ||
        !Array.isArray(served.last.live_sizes) || !Array.isArray(served.last.holes)) {
      fail("GET /oom: " + JSON.stringify(served).slice(0, 300));
    }
  } else if (oom0.state === "oom" && !/ on /.test(oom0.v)) {
    fail("the OOM card: " + JSON.stringify(oom0));
  }

  // 2. the charts draw data: several points on the memory chart, histogram
  //    bars and class boundaries, and pixels in the series colours
  await until(page, "6 points on the memory chart", () => Number(document.getElementById("chart-mem").dataset.points) >= 6);
  await until(page, "histogram bars", () => Number(document.getElementById("chart-hist").dataset.bars) > 0);
  const painted = await page.evaluate(() => {
    const count = (id, rgb) => {
      const c = document.getElementById(id);
      const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
      let n = 0;
      for (let i = 0; i < d.length; i += 4) {
        if (Math.abs(d[i] - rgb[0]) < 40 && Math.abs(d[i + 1] - rgb[1]) < 40 && Math.abs(d[i + 2] - rgb[2]) < 40 && d[i + 3] > 200) n++;
      }
      return n;
    };
    return {
      inUse: count("chart-mem", [37, 99, 235]),
      reserved: count("chart-mem", [245, 158, 11]),
      bars: count("chart-hist", [15, 118, 110]),
      classes: Number(document.getElementById("chart-hist").dataset.classes),
      rows: document.querySelectorAll("#classes tbody tr").length,
      inUseCard: document.getElementById("c-inuse").textContent,
      hitCard: document.getElementById("c-hit").textContent,
      hitCardSub: document.getElementById("c-hit-s").textContent,
    };
  });
  log("painted", JSON.stringify(painted));
  if (painted.inUse < 40) fail("the in-use line is not drawn");
  if (painted.reserved < 40) fail("the reserved line is not drawn");
  if (painted.bars < 50) fail("no histogram bars drawn");
  if (painted.classes < 1 || painted.rows < 1) fail("no size classes shown");
  if (!/(B|KiB|MiB|GiB)$/.test(painted.inUseCard)) fail("in-use card without a unit: " + painted.inUseCard);
  // the hit-rate card names its two figures (docs/stats.md): overall, small-path
  if (!/^overall [0-9.]+ ?%$/.test(painted.hitCard)) fail("hit-rate card: not an overall hit rate: " + painted.hitCard);
  if (!/^small-path [0-9.]+ ?% of .* large, .* called the backend/.test(painted.hitCardSub))
    fail("hit-rate card: no small-path figure or large-path count: " + painted.hitCardSub);

  // 2b. history, markers, the recent histogram, segments, tooltip, zoom, sort
  await until(page, "stored history points", () => Number(document.getElementById("chart-mem").dataset.stored) >= 2);
  await until(page, "a policy-change marker", () => Number(document.getElementById("chart-mem").dataset.markers) >= 1);
  await until(page, "the last-minute histogram", () => Number(document.getElementById("chart-hist-recent").dataset.bars) > 0);
  await until(page, "large segments", () => Number(document.getElementById("seg-map").dataset.segments) >= 1);
  const more = await page.evaluate(() => {
    const count = (id, rgb) => {
      const c = document.getElementById(id);
      const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
      let n = 0;
      for (let i = 0; i < d.length; i += 4) {
        if (Math.abs(d[i] - rgb[0]) < 40 && Math.abs(d[i + 1] - rgb[1]) < 40 && Math.abs(d[i + 2] - rgb[2]) < 40 && d[i + 3] > 200) n++;
      }
      return n;
    };
    return {
      recentBars: count("chart-hist-recent", [8, 145, 178]),
      usedPieces: count("seg-map", [124, 58, 237]),
      marker: count("chart-mem", [220, 38, 38]),
      mappedLane: count("seg-map", [71, 85, 105]),
      expandable: Number(document.getElementById("seg-map").dataset.expandable),
      rowPx: document.getElementById("seg-map").clientHeight,
      segNote: document.getElementById("seg-note").textContent,
    };
  });
  log("more", JSON.stringify(more));
  if (more.recentBars < 20) fail("the last-minute histogram has no bars drawn");
  if (more.usedPieces < 20) fail("the segment map shows no used pieces");
  if (more.marker < 10) fail("no policy-change marker drawn");
  // an expandable segment is drawn as what it is: its mapped pages in a lane
  // of their own over the reserved span, on a row tall enough to read
  if (more.expandable > 0 && more.mappedLane < 50) fail("the expandable segment's mapped lane is not drawn");
  if (serverBin && more.expandable < 1) fail("the test server's large path is expandable, the map shows none");
  if (!/segments ·.*held ·.*in use/.test(more.segNote)) fail("segment summary missing: " + more.segNote);
  const box = await page.locator("#chart-mem").boundingBox();
  await page.mouse.move(box.x + box.width - 40, box.y + box.height / 2);
  await until(page, "the memory tooltip", () => !document.getElementById("mem-tip").hidden && /in use/.test(document.getElementById("mem-tip").textContent));
  await page.mouse.move(box.x + box.width * 0.5, box.y + box.height / 2);
  await page.mouse.down();
  await page.mouse.move(box.x + box.width * 0.9, box.y + box.height / 2, { steps: 4 });
  await page.mouse.up();
  await until(page, "the zoom", () => !document.getElementById("unzoom").hidden && /zoomed/.test(document.getElementById("mem-note").textContent));
  // zoomed in, no range button claims the axis
  if (await page.evaluate(() => document.querySelectorAll("#range button.on").length) !== 0) fail("a range button is lit while zoomed");
  if (!/zoom=\d+-\d+/.test(await page.evaluate(() => location.hash))) fail("the zoom is not in the URL");
  await page.dblclick("#chart-mem");
  await until(page, "the zoom reset", () => document.getElementById("unzoom").hidden);
  // the range button lit is the axis' span: by default the whole run (the
  // test server reports no uptime: its first point, a minute at least); with
  // 5 min lit the axis spans 5 min, the part before the data marked empty
  const axisOf = () => page.evaluate(() => {
    const c = document.getElementById("chart-mem");
    return { span: Number(c.dataset.t1) - Number(c.dataset.t0), empty: c.dataset.empty,
      on: Array.from(document.querySelectorAll("#range button.on")).map((b) => b.dataset.range),
      hash: location.hash, pool: document.getElementById("pool").value,
      sort: (document.querySelector("#classes th.asc, #classes th.desc") || {}).className || "",
      sortKey: (document.querySelector("#classes th.asc, #classes th.desc") || { dataset: {} }).dataset.key };
  });
  const wantAxis = (a, ms, what) => {
    if (a.on.length !== 1 || Number(a.on[0]) !== ms) fail(what + ": buttons lit " + JSON.stringify(a.on) + ", want " + ms);
    if (Math.abs(a.span - ms) > 3000) fail(what + ": the axis spans " + a.span + " ms, the button says " + ms);
  };
  let axis = await axisOf();
  log("axis", JSON.stringify(axis));
  if (serverBin && (axis.on.join() !== "0" || axis.span < 60000 || axis.span > 180000)) {
    fail("the default range: buttons lit " + JSON.stringify(axis.on) + ", axis " + axis.span + " ms");
  }
  await page.click("#range button[data-range='300000']");
  axis = await axisOf();
  wantAxis(axis, 300000, "after a click on 5 min");
  if (serverBin && !/^no data before \d/.test(axis.empty)) fail("the minutes without data are not marked: " + axis.empty);
  await page.click('#classes th[data-key="inUse"]');
  const sorted = await page.evaluate(() => {
    const th = document.querySelector('#classes th[data-key="inUse"]');
    const cells = Array.from(document.querySelectorAll("#classes tbody tr")).map((tr) => tr.cells[2].textContent);
    return { cls: th.className, cells };
  });
  if (sorted.cls !== "desc") fail("the in-use column is not sorted: " + sorted.cls);
  const unit = { B: 1, KiB: 1024, MiB: 1048576, GiB: 1073741824 };
  const bytes = sorted.cells.map((t) => { const m = t.match(/([\d.]+) (\w+)/); return m ? Number(m[1]) * unit[m[2]] : 0; });
  for (let i = 1; i < bytes.length; i++) if (bytes[i] > bytes[i - 1]) fail("rows not in descending in-use order: " + sorted.cells.join(", "));

  // 2d. the view (pool, range, sort) is in the URL: a reload keeps it, and a
  //     shared link (another pool and range) opens that view
  axis = await axisOf();
  const pool0 = axis.pool;
  for (const want of ["pool=" + encodeURIComponent(pool0), "range=5m", "sort=inUse.desc"]) {
    if (!axis.hash.includes(want)) fail("the URL lacks " + want + ": " + axis.hash);
  }
  await page.reload({ waitUntil: "load" });
  await until(page, "live after the reload", () => document.getElementById("conn").textContent === "live");
  await until(page, "the chart after the reload", () => Number(document.getElementById("chart-mem").dataset.points) >= 1);
  axis = await axisOf();
  log("after reload", JSON.stringify(axis));
  wantAxis(axis, 300000, "after the reload");
  if (axis.pool !== pool0) fail("the reload lost the pool: " + axis.pool + ", was " + pool0);
  if (axis.sortKey !== "inUse" || axis.sort !== "desc") fail("the reload lost the sort: " + axis.sortKey + " " + axis.sort);
  const other = (await page.evaluate(() => Array.from(document.getElementById("pool").options).map((o) => o.value))).find((n) => n !== pool0);
  if (other) {
    await page.goto(baseUrl + "#pool=" + encodeURIComponent(other) + "&range=6h");
    await until(page, "the shared link's pool", (n) => document.getElementById("pool").value === n, other);
    axis = await axisOf();
    wantAxis(axis, 21600000, "a shared link with range=6h");
    await page.goto(baseUrl + "#pool=" + encodeURIComponent(pool0) + "&range=5m&sort=block.asc");
    await until(page, "back to the first pool", (n) => document.getElementById("pool").value === n, pool0);
  }
  const fav = await page.evaluate(async () => { const r = await fetch("/favicon.ico"); return [r.status, r.headers.get("Content-Type")]; });
  if (fav[0] !== 200 || fav[1] !== "image/x-icon") fail("/favicon.ico: " + JSON.stringify(fav));

  // 2c. the loop decisions: newest first, signed MiB for the predicted and
  //     the measured effect, the rejected-by-replay count. Our test server
  //     serves a fixed audit (testserver.c ADAPT_JSON); against a live
  //     process (--url) at least the panel must answer (rows or its empty text).
  await until(page, "the loop decisions panel", () => document.querySelector("#loop tbody").textContent !== "no data yet");
  const loop = await page.evaluate(() => ({
    note: document.getElementById("loop-note").textContent,
    rows: Array.from(document.querySelectorAll("#loop tbody tr")).map((tr) => Array.from(tr.cells).map((td) => td.textContent)),
  }));
  log("loop", JSON.stringify(loop));
  if (serverBin) {
    const want = [
      ["41", "host", "add", "12 KiB", "applied", "–", "–"],
      ["38", "device0", "trim", "512 MiB", "applied", "–", "-448.00 MiB"],
      ["36", "device0", "retire", "1.5 KiB", "rejected", "+0.25 MiB", "–"],
      ["30", "device0", "add", "3 KiB", "applied", "-2.00 MiB", "-1.00 MiB"],
    ];
    if (JSON.stringify(loop.rows) !== JSON.stringify(want)) fail("loop decisions rows: " + JSON.stringify(loop.rows));
    if (!/step 42/.test(loop.note) || !/1 rejected by replay/.test(loop.note)) fail("loop note: " + loop.note);
  } else if (!loop.rows.length || (loop.rows[0].length !== 7 && !/loop|changes|audit/.test(loop.rows[0][0]))) {
    fail("loop decisions panel neither lists nor explains: " + JSON.stringify(loop.rows));
  }

  // 3. the editor holds the policy in force
  await until(page, "the policy text", () => document.getElementById("policy-text").value.includes("pools"));
  const v0 = Number(await page.textContent("#policy-version"));
  const policy = JSON.parse(await page.inputValue("#policy-text"));
  log("policy version", v0);

  // 4. without the token the edit is refused with the server's message
  if (token) {
    await page.fill("#token", "");
    await page.fill("#policy-text", JSON.stringify(policy, null, 2));
    await page.click("#apply");
    await until(page, "the 401 message", () => /401/.test(document.getElementById("policy-msg").textContent));
    await page.fill("#token", token);
  }

  // 5. a valid edit takes effect: a coarser ladder for the device pool and
  //    a new description. Against a live process (--url) the policy loop may
  //    bump the version meanwhile: then the page answers 412 and offers to
  //    overwrite, which the test accepts.
  const strict = !!serverBin; // our test server runs no policy loop
  const good = structuredClone(policy);
  good.pools.device.classes = { min: 512, per_doubling: 2 };
  good.description = "edited by the browser test " + Date.now();
  delete good.version;
  await page.fill("#policy-text", JSON.stringify(good, null, 2));
  for (let attempt = 0; attempt < 3; attempt++) {
    await page.click("#apply");
    await until(page, "an answer to the PUT", () => /ok|err/.test(document.getElementById("policy-msg").className));
    const cls = await page.getAttribute("#policy-msg", "class");
    if (cls.includes("ok")) break;
    const text = await page.textContent("#policy-msg");
    if (!/412/.test(text) || strict) fail("the valid edit was refused: " + text);
    log("412 (the loop changed the policy meanwhile): overwriting");
  }
  await until(page, "the success message", () => document.getElementById("policy-msg").className.includes("ok"));
  await until(page, "the version to bump", (v) => Number(document.getElementById("policy-version").textContent) > v, v0);
  const v1 = Number(await page.textContent("#policy-version"));
  log("applied, version", v0, "->", v1);
  const served = await page.evaluate(async () => (await fetch("/policy")).json());
  if (served.description !== good.description) fail("the server does not hold the edited policy: " + served.description);
  if (strict && JSON.stringify(served.pools.device.classes) !== JSON.stringify(good.pools.device.classes)) {
    fail("the server does not hold the edited classes: " + JSON.stringify(served.pools.device.classes));
  }
  await until(page, "the change log entry", () => /PUT/.test(document.getElementById("changes").textContent), undefined, 15000);

  // 5b. the diff view shows what the edit changed (from the store's documents)
  await until(page, "the diff of the edit", () => Number(document.getElementById("diff").dataset.added) > 0 && /description/.test(document.getElementById("diff").textContent), undefined, 15000);

  // 6. an invalid edit shows the validator's error; nothing changes
  const bad = structuredClone(served);
  bad.pools.device.slab_size = 1000;
  await page.fill("#policy-text", JSON.stringify(bad, null, 2));
  await page.click("#apply");
  await until(page, "the error message", () => document.getElementById("policy-msg").className.includes("err"));
  const msg = await page.textContent("#policy-msg");
  log("refused with:", msg);
  if (!/400/.test(msg) || !/slab_size/.test(msg)) fail("the error does not name the rule: " + msg);
  await page.fill("#policy-text", "{ not json");
  await page.click("#apply");
  await until(page, "the parse error", () => /400/.test(document.getElementById("policy-msg").textContent) && !/slab_size/.test(document.getElementById("policy-msg").textContent));
  // 6b. a whole policy must be complete: a fragment is refused naming what
  //     it leaves out (use PATCH to change part), and changes nothing
  await page.fill("#policy-text", JSON.stringify({ version: 1 }));
  await page.click("#apply");
  await until(page, "the incomplete policy's error", () => /needs a complete policy/.test(document.getElementById("policy-msg").textContent));
  const incomplete = await page.textContent("#policy-msg");
  log("refused with:", incomplete);
  if (!/400/.test(incomplete) || !/missing pools\.device, pools\.pinned, pools\.host, adapt, telemetry \(use PATCH to change part\)/.test(incomplete)) {
    fail("the incomplete policy's error does not name what is missing: " + incomplete);
  }
  const after = await page.evaluate(async () => { const r = await fetch("/policy"); return { etag: r.headers.get("ETag"), body: await r.json() }; });
  if (strict && after.etag !== `"${v1}"`) fail("the version moved after refused edits: " + after.etag);
  if (after.body.pools.device.slab_size === 1000) fail("the refused value is in force");

  // put the valid one back in the editor for the screenshot
  await page.click("#reload");
  await page.waitForTimeout(1500);
  mkdirSync(outDir, { recursive: true });
  const shot = join(outDir, "dashboard.png");
  await page.screenshot({ path: shot, fullPage: true });
  log("screenshot", shot);
  // 7. the store off (/history and /runs answer 503): the memory chart says
  //    so and how to turn it on, and so do the change list and the diff
  if (serverBin) {
    const offUrl = await startServer(["--no-store"]);
    const off = await browser.newPage({ viewport: { width: 1440, height: 1000 } });
    off.on("pageerror", (e) => consoleErrors.push(String(e)));
    await off.goto(offUrl, { waitUntil: "load" });
    await until(off, "the store-off note on the memory chart", () => {
      const c = document.getElementById("chart-mem");
      return c.dataset.historyOff === "1" && /store is off/.test(c.dataset.empty) && /ADAPTALLOC_DB=/.test(c.dataset.empty);
    });
    const texts = await off.evaluate(() => ({
      changes: document.getElementById("changes").textContent,
      diff: document.getElementById("diff").textContent,
      note: document.getElementById("mem-note").textContent,
    }));
    log("store off", JSON.stringify(texts));
    if (!/store is off/.test(texts.changes) || !/ADAPTALLOC_DB/.test(texts.changes)) fail("the change list does not say the store is off: " + texts.changes);
    if (!/store is off/.test(texts.diff)) fail("the diff does not say the store is off: " + texts.diff);
    await off.close();
  }
  if (consoleErrors.length) fail("console errors: " + consoleErrors.join(" | "));
}

let code = 0;
try {
  await main();
  log("PASS");
} catch (e) {
  log("FAIL:", e.message);
  code = 1;
} finally {
  clearTimeout(watchdog);
  if (browser) await browser.close().catch(() => {});
  cleanup();
}
process.exit(code);
