// grafana-shot.mjs — photographs the page tools/grafana_preview.py wrote (the
// shipped Grafana dashboard drawn from a live Prometheus) with Debian's
// chromium through playwright-core; tools/grafana-screenshot.sh runs it for
// docs/img/grafana.png. Checks, before the picture, that the page has one
// panel element per panel of the report beside it with that panel's title.
//
//   node tests/browser/grafana-shot.mjs --html PAGE.html --out grafana.png
//
// Exit 0 done, 1 failed, 77 no playwright-core or no chromium.
import { existsSync, readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
import { chromiumOrSkip, launch, options } from "./harness.mjs";

const opt = options(process.argv.slice(2));
const htmlPath = opt("html", "");
const out = opt("out", "grafana.png");
const chromiumPath = opt("chromium", process.env.CHROMIUM || "/usr/bin/chromium");
const log = (...a) => console.log("[grafana-shot]", ...a);

const chromium = await chromiumOrSkip(log, chromiumPath);
if (!htmlPath || !existsSync(htmlPath)) {
  log("usage: --html PAGE.html --out FILE.png (no page at", JSON.stringify(htmlPath) + ")");
  process.exit(2);
}
const reportPath = htmlPath.replace(/\.html$/, ".json");
const report = existsSync(reportPath) ? JSON.parse(readFileSync(reportPath, "utf8")) : null;

const browser = await launch(chromium, chromiumPath);
let code = 0;
try {
  const page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
  await page.goto(pathToFileURL(htmlPath).href, { waitUntil: "load" });
  const shown = await page.evaluate(() => Array.from(document.querySelectorAll("[data-panel-id]"))
    .map((el) => ({ id: el.dataset.panelId, title: el.querySelector(".panel-title").textContent })));
  if (report) {
    const want = report.panels.map((p) => ({ id: String(p.id), title: p.title }));
    const key = (p) => p.id + "\u0000" + p.title.replace(/^\u2304 /, "");
    const got = shown.map(key).sort().join("\n");
    if (got !== want.map(key).sort().join("\n")) {
      throw new Error("the page's panels differ from the report's:\n" + got + "\n---\n" +
        want.map(key).sort().join("\n"));
    }
  }
  await page.screenshot({ path: out, fullPage: true });
  log("wrote", out, "(" + shown.length + " panels)");
} catch (e) {
  log("FAIL:", e.message);
  code = 1;
} finally {
  await browser.close().catch(() => {});
}
process.exit(code);
