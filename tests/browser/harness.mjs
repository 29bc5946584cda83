// harness.mjs — what the browser scripts share (dashboard.test.mjs,
// screenshots.mjs, grafana-shot.mjs): their `--name value` options, and
// Chromium through playwright-core, the script skipped (exit 77) when either
// is missing.
import { existsSync } from "node:fs";

const SKIP = 77;

// opt(name, default): the value after --name on the command line.
export function options(args) {
  return (name, dflt) => {
    const i = args.indexOf("--" + name);
    return i >= 0 && i + 1 < args.length ? args[i + 1] : dflt;
  };
}

// playwright-core's chromium, or exit 77 naming what is missing.
export async function chromiumOrSkip(log, chromiumPath) {
  let chromium;
  try {
    ({ chromium } = await import("playwright-core"));
  } catch (e) {
    log("SKIP: playwright-core is not installed (npm ci --prefix tests/browser):", e.message);
    process.exit(SKIP);
  }
  if (!existsSync(chromiumPath)) {
    log("SKIP: no chromium at", chromiumPath, "(apt-get install chromium)");
    process.exit(SKIP);
  }
  return chromium;
}

// Headless Chromium with nothing of its own on the network.
export function launch(chromium, chromiumPath) {
  return chromium.launch({
    executablePath: chromiumPath,
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
      "--disable-component-update", "--disable-sync", "--no-first-run"],
  });
}
