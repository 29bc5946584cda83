// layout.mjs — the dashboard's structure as plain data, for the screenshots'
// drift check: what panels the page has, in order, and what each shows (its
// heading, legend entries, figures and table columns), the cards' titles and
// the range buttons. Values (sizes, counts, times) are left out: they differ
// from run to run, the structure must not. tools/screenshots.sh writes it
// beside docs/img/*.png (docs/img/dashboard.layout.json); the browser test
// compares the page it tests against that file (dashboard.test.mjs).
export async function pageLayout(page) {
  return await page.evaluate(() => {
    const own = (el) => Array.from(el.childNodes).filter((n) => n.nodeType === 3).map((n) => n.textContent).join(" ").replace(/\s+/g, " ").trim();
    const panels = Array.from(document.querySelectorAll("main .panel")).map((p) => {
      const h2 = p.querySelector("h2");
      return {
        heading: h2 ? own(h2) : "",
        legend: Array.from(p.querySelectorAll(".legend")).map((l) => own(l)).filter((t) => t),
        figures: Array.from(p.querySelectorAll("canvas, table, pre, textarea")).map((e) => e.tagName.toLowerCase() + "#" + e.id),
        columns: Array.from(p.querySelectorAll("thead th")).map((th) => th.textContent.trim()),
      };
    });
    return {
      cards: Array.from(document.querySelectorAll("#cards .card .k")).map((k) => k.textContent.trim()),
      ranges: Array.from(document.querySelectorAll("#range button[data-range]")).map((b) => b.textContent.trim()),
      panels,
    };
  });
}

// the differences between two layouts, as readable lines ([] when equal)
export function layoutDiff(want, got) {
  const out = [];
  const j = (v) => JSON.stringify(v);
  if (j(want.cards) !== j(got.cards)) out.push("cards: " + j(want.cards) + " -> " + j(got.cards));
  if (j(want.ranges) !== j(got.ranges)) out.push("range buttons: " + j(want.ranges) + " -> " + j(got.ranges));
  const n = Math.max(want.panels.length, got.panels.length);
  for (let i = 0; i < n; i++) {
    const a = want.panels[i], b = got.panels[i];
    if (!a) { out.push("panel " + (i + 1) + " added: " + j(b)); continue; }
    if (!b) { out.push("panel " + (i + 1) + " removed: " + j(a)); continue; }
    for (const k of ["heading", "legend", "figures", "columns"]) {
      if (j(a[k]) !== j(b[k])) out.push("panel " + (i + 1) + " (" + a.heading + ") " + k + ": " + j(a[k]) + " -> " + j(b[k]));
    }
  }
  return out;
}
