/*
 * app.js — the adaptalloc dashboard. No build step, no libraries: it polls
 * /stats every second, keeps the last five minutes per pool in memory, and
 * draws two charts by hand on <canvas>: bytes in use and reserved over time,
 * and the request-size histogram (core's quarter-doubling buckets on a log2
 * axis) with the pool's class boundaries drawn over it. It lists the classes,
 * the policy changes (from /history), and edits the policy (PUT /policy with
 * If-Match, and a bearer token when one is entered).
 *
 * Shapes read: /stats {"pools": [aa_pool_stats_json ...], "policy_version"},
 * see docs/stats.md; /history {"policy_changes" | "changes": [...]}.
 */
"use strict";
(() => {
  const POLL_MS = 1000;
  const HISTORY_MS = 5000;
  const KEEP_MS = 5 * 60 * 1000;

  const $ = (id) => document.getElementById(id);
  const state = {
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
  };

  // ------------------------------------------------------------ formatting
  const UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  function fmtBytes(n) {
    if (n === undefined || n === null || !isFinite(n)) return "–";
    let u = 0;
    let v = Math.abs(n);
    while (v >= 1024 && u < UNITS.length - 1) { v /= 1024; u++; }
    const digits = u === 0 ? 0 : v >= 100 ? 0 : v >= 10 ? 1 : 2;
    // trailing zeros say nothing: "2 MiB", "1.5 KiB", "14.7 MiB"
    const text = v.toFixed(digits).replace(/\.0+$/, "").replace(/(\.\d*[1-9])0+$/, "$1");
    return (n < 0 ? "-" : "") + text + " " + UNITS[u];
  }
  function fmtCount(n) {
    if (n === undefined || n === null || !isFinite(n)) return "–";
    const a = Math.abs(n);
    const t = (v, d) => v.toFixed(d).replace(/\.0$/, "");
    if (a >= 1e9) return t(n / 1e9, a >= 1e10 ? 0 : 1) + " G";
    if (a >= 1e6) return t(n / 1e6, a >= 1e7 ? 0 : 1) + " M";
    if (a >= 1e4) return t(n / 1e3, a >= 1e5 ? 0 : 1) + " k";
    return String(Math.round(n));
  }
  function fmtPct(x) {
    if (x === undefined || x === null || !isFinite(x)) return "–";
    const p = x * 100;
    return (p >= 10 || p === 0 ? p.toFixed(0) : p.toFixed(1)) + " %";
  }
  function fmtTime(ms) {
    const d = new Date(ms);
    const pad = (v) => String(v).padStart(2, "0");
    return pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
  }
  function fmtUptime(sec) {
    if (sec < 60) return Math.floor(sec) + " s";
    if (sec < 3600) return Math.floor(sec / 60) + " min";
    if (sec < 86400) return Math.floor(sec / 3600) + " h " + Math.floor((sec % 3600) / 60) + " min";
    return Math.floor(sec / 86400) + " d " + Math.floor((sec % 86400) / 3600) + " h";
  }
  const num = (v) => (typeof v === "number" && isFinite(v) ? v : 0);

  // core's histogram buckets: 0..3 exact, then four per doubling
  function bucketLower(i) {
    if (i < 4) return i;
    const l = Math.floor(i / 4) + 1;
    const m = i % 4;
    return (4 + m) * Math.pow(2, l - 2);
  }

  // ------------------------------------------------------------ fetch
  function authHeaders() {
    const t = $("token").value.trim();
    return t ? { Authorization: "Bearer " + t } : {};
  }
  async function errorText(r) {
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

  // ------------------------------------------------------------ canvas
  function setupCanvas(c) {
    const dpr = window.devicePixelRatio || 1;
    const w = Math.max(100, c.clientWidth);
    const h = Math.max(80, c.clientHeight);
    if (c.width !== Math.round(w * dpr) || c.height !== Math.round(h * dpr)) {
      c.width = Math.round(w * dpr);
      c.height = Math.round(h * dpr);
    }
    const g = c.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, w, h);
    g.font = "11px system-ui, sans-serif";
    return { g, w, h };
  }
  function css(name) {
    return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  }
  // a "nice" step for about n ticks over [0, max], in binary units for bytes
  function byteStep(max, n) {
    const raw = max / n;
    let unit = 1;
    while (unit * 1024 <= raw) unit *= 1024;
    const r = raw / unit;
    const m = r <= 1 ? 1 : r <= 2 ? 2 : r <= 2.5 ? 2.5 : r <= 5 ? 5 : r <= 10 ? 10 : r <= 20 ? 20 : r <= 25 ? 25 : r <= 50 ? 50 : r <= 100 ? 100 : r <= 200 ? 200 : r <= 250 ? 250 : 500;
    return m * unit;
  }
  function countStep(max, n) {
    const raw = max / n;
    const p = Math.pow(10, Math.floor(Math.log10(Math.max(raw, 1))));
    const r = raw / p;
    return (r <= 1 ? 1 : r <= 2 ? 2 : r <= 5 ? 5 : 10) * p;
  }
  function emptyNote(g, w, h, text) {
    g.fillStyle = css("--muted");
    g.textAlign = "center";
    g.fillText(text, w / 2, h / 2);
  }

  function drawMemory() {
    const c = $("chart-mem");
    const { g, w, h } = setupCanvas(c);
    const pts = state.series.get(state.pool) || [];
    const L = 64, R = 12, T = 10, B = 24;
    const now = Date.now();
    c.dataset.points = String(pts.length);
    if (pts.length === 0) { emptyNote(g, w, h, "waiting for data…"); return; }
    // the window grows with the data from one minute to five
    const span = Math.min(KEEP_MS, Math.max(60000, now - pts[0].t));
    const t0 = now - span;
    let max = 0;
    for (const p of pts) max = Math.max(max, p.reserved, p.inUse);
    if (max <= 0) max = 1024;
    const step = byteStep(max * 1.1, 5);
    const top = Math.ceil((max * 1.05) / step) * step;
    const x = (t) => L + ((t - t0) / span) * (w - L - R);
    const y = (v) => T + (1 - v / top) * (h - T - B);
    // grid and y labels
    g.strokeStyle = css("--line");
    g.fillStyle = css("--muted");
    g.lineWidth = 1;
    g.textAlign = "right";
    g.textBaseline = "middle";
    for (let v = 0; v <= top + step / 2; v += step) {
      g.beginPath();
      g.moveTo(L, Math.round(y(v)) + 0.5);
      g.lineTo(w - R, Math.round(y(v)) + 0.5);
      g.stroke();
      g.fillText(fmtBytes(v), L - 6, y(v));
    }
    // x labels back from now: every 10 s, 30 s or minute
    g.textBaseline = "top";
    const tick = span <= 60000 ? 10000 : span <= 180000 ? 30000 : 60000;
    for (let d = 0; d <= span; d += tick) {
      const label = d === 0 ? "now" : d % 60000 === 0 ? "−" + d / 60000 + " min" : "−" + d / 1000 + " s";
      g.textAlign = d === 0 ? "right" : "center";
      g.fillText(label, x(now - d), h - B + 6);
    }
    const line = (key, color, fill) => {
      g.beginPath();
      pts.forEach((p, i) => {
        const px = x(Math.max(p.t, t0));
        const py = y(p[key]);
        if (i === 0) g.moveTo(px, py); else g.lineTo(px, py);
      });
      if (fill) {
        g.lineTo(x(pts[pts.length - 1].t), y(0));
        g.lineTo(x(Math.max(pts[0].t, t0)), y(0));
        g.closePath();
        g.globalAlpha = 0.12;
        g.fillStyle = color;
        g.fill();
        g.globalAlpha = 1;
        return;
      }
      g.strokeStyle = color;
      g.lineWidth = 2;
      g.stroke();
    };
    line("reserved", css("--reserved"), true);
    line("inUse", css("--inuse"), true);
    line("reserved", css("--reserved"), false);
    line("inUse", css("--inuse"), false);
    const last = pts[pts.length - 1];
    setText("mem-note", "now " + fmtBytes(last.inUse) + " in use of " + fmtBytes(last.reserved) + " reserved");
  }

  function drawHistogram(pool) {
    const c = $("chart-hist");
    const { g, w, h } = setupCanvas(c);
    const L = 56, R = 24, T = 10, B = 24;
    const buckets = histBuckets(pool);
    const classes = (pool && pool.classes) || [];
    c.dataset.bars = String(buckets.length);
    c.dataset.classes = String(classes.length);
    if (buckets.length === 0 && classes.length === 0) {
      emptyNote(g, w, h, pool && pool.telemetry === false ? "telemetry is off for this pool" : "no requests yet");
      return;
    }
    // x range: powers of two around the data and the classes
    let lo = Infinity, hi = 0;
    for (const b of buckets) { lo = Math.min(lo, Math.max(b.lower, 1)); hi = Math.max(hi, b.upper); }
    for (const k of classes) { lo = Math.min(lo, num(k.block_size)); hi = Math.max(hi, num(k.block_size)); }
    let e0 = Math.floor(Math.log2(Math.max(lo, 1)));
    let e1 = Math.ceil(Math.log2(Math.max(hi, 2)));
    if (e1 - e0 < 3) { e0 = Math.max(0, e0 - 1); e1 = e0 + 4; }
    const x = (v) => L + ((Math.log2(Math.max(v, 1)) - e0) / (e1 - e0)) * (w - L - R);
    let maxc = 0;
    for (const b of buckets) maxc = Math.max(maxc, b.count);
    if (maxc <= 0) maxc = 1;
    const step = countStep(maxc * 1.1, 4);
    const top = Math.ceil((maxc * 1.05) / step) * step;
    const y = (v) => T + (1 - v / top) * (h - T - B);
    g.strokeStyle = css("--line");
    g.fillStyle = css("--muted");
    g.lineWidth = 1;
    g.textAlign = "right";
    g.textBaseline = "middle";
    for (let v = 0; v <= top + step / 2; v += step) {
      g.beginPath();
      g.moveTo(L, Math.round(y(v)) + 0.5);
      g.lineTo(w - R, Math.round(y(v)) + 0.5);
      g.stroke();
      g.fillText(fmtCount(v), L - 6, y(v));
    }
    // x labels at powers of two, thinned to fit
    g.textAlign = "center";
    g.textBaseline = "top";
    const every = Math.max(1, Math.ceil((e1 - e0) / Math.max(1, Math.floor((w - L - R) / 56))));
    for (let e = e0; e <= e1; e++) {
      if ((e - e0) % every) continue;
      g.textAlign = e === e1 ? "right" : e === e0 ? "left" : "center";
      g.fillText(fmtBytes(Math.pow(2, e)), x(Math.pow(2, e)) + (e === e1 ? R - 2 : 0), h - B + 6);
    }
    // bars
    g.fillStyle = css("--hist");
    for (const b of buckets) {
      const x0 = x(Math.max(b.lower, 1));
      const x1 = x(b.upper + 1);
      const bw = Math.max(1, x1 - x0 - 1);
      g.fillRect(x0, y(b.count), bw, y(0) - y(b.count));
    }
    // class boundaries
    g.strokeStyle = css("--class");
    g.lineWidth = 1;
    g.setLineDash([3, 3]);
    for (const k of classes) {
      const px = Math.round(x(num(k.block_size))) + 0.5;
      g.globalAlpha = k.retiring ? 0.35 : 0.85;
      g.beginPath();
      g.moveTo(px, T);
      g.lineTo(px, h - B);
      g.stroke();
    }
    g.globalAlpha = 1;
    g.setLineDash([]);
    const total = buckets.reduce((s, b) => s + b.count, 0);
    let note = fmtCount(total) + " requests since start · " + classes.length + " classes";
    const hh = (pool && Array.isArray(pool.hh) ? pool.hh : []).filter((e) => e && num(e.count) > 0);
    if (hh.length && total > 0) {
      const top = hh.reduce((a, b) => (num(b.count) > num(a.count) ? b : a));
      const sz = num(top.size);
      note += " · top size " + (sz % 1024 && sz < 1048576 ? sz + " B" : fmtBytes(sz)) + " (" + fmtPct(num(top.count) / total) + ")";
    }
    setText("hist-note", note);
  }

  // [{lower, upper, count}] from the sparse "hist" of aa_pool_stats_json
  function histBuckets(pool) {
    const out = [];
    if (!pool || !Array.isArray(pool.hist)) return out;
    pool.hist.forEach((e, i) => {
      let bucket, count;
      if (typeof e === "number") { bucket = i; count = e; }
      else if (e && typeof e === "object") { bucket = num(e.bucket); count = num(e.count); }
      else return;
      if (count <= 0) return;
      const lower = e && typeof e.lower === "number" ? e.lower : bucketLower(bucket);
      const upper = bucketLower(bucket + 1) - 1;
      out.push({ lower, upper: Math.max(upper, lower), count });
    });
    return out;
  }

  // ------------------------------------------------------------ rendering
  function setText(id, text) {
    const el = $(id);
    if (el.textContent !== text) el.textContent = text;
  }

  function renderCards(p) {
    setText("c-inuse", fmtBytes(num(p.bytes_in_use)));
    setText("c-inuse-s", "peak " + fmtBytes(num(p.peak_bytes_in_use)));
    setText("c-reserved", fmtBytes(num(p.bytes_reserved)));
    const lim = num(p.limit_bytes);
    setText("c-reserved-s", "peak " + fmtBytes(num(p.peak_bytes_reserved)) + (lim ? " · limit " + fmtBytes(lim) : ""));
    const small = num(p.bytes_in_use) - num(p.large_bytes_in_use);
    const waste = num(p.bytes_in_use) > 0 ? (num(p.bytes_in_use) - num(p.bytes_requested)) / num(p.bytes_in_use) : 0;
    setText("c-waste", fmtPct(Math.max(0, waste)));
    setText("c-waste-s", fmtBytes(Math.max(0, num(p.bytes_in_use) - num(p.bytes_requested))) + " lost to rounding up");
    const hits = num(p.cache_hits), misses = num(p.cache_misses);
    setText("c-hit", hits + misses > 0 ? fmtPct(hits / (hits + misses)) : "–");
    setText("c-hit-s", fmtCount(misses) + " misses · " + fmtCount(num(p.backend_allocs)) + " backend allocs");
    const rate = state.rate.get(p.name);
    setText("c-rate", rate === undefined ? fmtCount(num(p.allocs)) : fmtCount(rate) + "/s");
    setText("c-rate-s", fmtCount(num(p.allocs)) + " total · " + fmtCount(num(p.ooms)) + " OOM");
    const cls = p.classes || [];
    setText("c-classes", String(num(p.class_count) || cls.length));
    setText("c-classes-s", "small " + fmtBytes(small) + " · large " + fmtBytes(num(p.large_bytes_in_use)));
  }

  function renderClasses(p) {
    const tb = $("classes").tBodies[0];
    const cls = (p.classes || []).slice().sort((a, b) => num(a.block_size) - num(b.block_size));
    const rows = [];
    for (const k of cls) {
      const inUse = num(k.bytes_in_use);
      const waste = inUse > 0 ? (inUse - num(k.bytes_requested)) / inUse : 0;
      const hm = num(k.hits) + num(k.misses);
      rows.push({
        retiring: !!k.retiring,
        cells: [
          fmtBytes(num(k.block_size)) + (k.retiring ? " (retiring)" : ""),
          fmtCount(num(k.slabs)),
          fmtBytes(inUse),
          fmtBytes(num(k.bytes_reserved)),
          fmtCount(num(k.hits)),
          fmtCount(num(k.misses)),
          hm > 0 ? fmtPct(num(k.hits) / hm) : "–",
          inUse > 0 ? fmtPct(Math.max(0, waste)) : "–",
        ],
        // worth a look: a tenth wasted, on at least a MiB
        hot: waste > 0.1 && inUse >= 1048576,
      });
    }
    while (tb.rows.length > rows.length) tb.deleteRow(-1);
    rows.forEach((r, i) => {
      const tr = tb.rows[i] || tb.insertRow(-1);
      tr.className = r.retiring ? "retiring" : "";
      while (tr.cells.length < r.cells.length) tr.insertCell(-1);
      r.cells.forEach((t, j) => {
        if (tr.cells[j].textContent !== t) tr.cells[j].textContent = t;
      });
      tr.cells[7].className = r.hot ? "hot" : "";
    });
  }

  function renderPoolPicker() {
    const sel = $("pool");
    const names = state.pools.map((p) => p.name);
    const have = Array.from(sel.options).map((o) => o.value);
    if (names.join("\u0000") !== have.join("\u0000")) {
      sel.textContent = "";
      for (const p of state.pools) {
        const o = document.createElement("option");
        o.value = p.name;
        const where = (p.backend || "") + (p.device >= 0 ? " " + p.device : "");
        o.textContent = p.name + (where && where !== p.name ? " (" + where + ")" : "");
        sel.appendChild(o);
      }
    }
    if (!names.includes(state.pool)) {
      // the pool holding the most memory
      let best = state.pools[0];
      for (const p of state.pools) if (num(p.bytes_reserved) > num(best.bytes_reserved)) best = p;
      state.pool = best ? best.name : null;
    }
    if (state.pool !== null) sel.value = state.pool;
  }

  function render() {
    renderPoolPicker();
    const p = state.pools.find((q) => q.name === state.pool);
    if (!p) { drawMemory(); drawHistogram(null); return; }
    renderCards(p);
    renderClasses(p);
    drawMemory();
    drawHistogram(p);
  }

  function setConn(ok, why) {
    const el = $("conn");
    el.className = "pill " + (ok ? "pill-ok" : "pill-bad");
    el.textContent = ok ? "live" : "offline";
    el.title = ok ? "updated every second" : why || "";
  }

  // ------------------------------------------------------------ stats
  function onStats(s) {
    const pools = Array.isArray(s.pools) ? s.pools : Array.isArray(s) ? s : s && s.name ? [s] : [];
    const now = Date.now();
    state.pools = pools.filter((p) => p && typeof p.name === "string");
    for (const p of state.pools) {
      let arr = state.series.get(p.name);
      if (!arr) { arr = []; state.series.set(p.name, arr); }
      arr.push({ t: now, inUse: num(p.bytes_in_use), reserved: num(p.bytes_reserved) });
      while (arr.length && arr[0].t < now - KEEP_MS) arr.shift();
      const prev = state.prev.get(p.name);
      if (prev && num(p.time_ns) > num(prev.time_ns)) {
        const dt = (num(p.time_ns) - num(prev.time_ns)) / 1e9;
        state.rate.set(p.name, Math.max(0, (num(p.allocs) - num(prev.allocs)) / dt));
      }
      state.prev.set(p.name, { time_ns: p.time_ns, allocs: p.allocs });
    }
    let v = s.policy_version;
    if (v === undefined && s.policy && typeof s.policy === "object") v = s.policy.version;
    if (v !== undefined && v !== null) {
      setText("policy-version", String(v));
      if (state.policyVersion !== null && v !== state.policyVersion) {
        if (!state.dirty) loadPolicy();
        pollHistory(false);
      }
      state.policyVersion = v;
    }
    const info = [];
    if (typeof s.model === "string" && s.model) info.push("model " + s.model);
    if (typeof s.run_id === "number" && s.run_id > 0) info.push("run " + s.run_id);
    if (typeof s.uptime_s === "number") info.push("up " + fmtUptime(s.uptime_s));
    setText("run-info", info.join(" · "));
    setText("updated", "updated " + fmtTime(now));
    render();
  }

  async function pollStats() {
    try {
      const r = await fetch("/stats", { cache: "no-store" });
      if (!r.ok) throw new Error(await errorText(r));
      onStats(await r.json());
      state.lastOk = Date.now();
      setConn(true);
    } catch (e) {
      setConn(false, String(e && e.message ? e.message : e));
    } finally {
      setTimeout(pollStats, POLL_MS);
    }
  }

  // ------------------------------------------------------------ history
  function changeTime(e) {
    if (typeof e.time_ms === "number") return e.time_ms;
    if (typeof e.ts_ms === "number") return e.ts_ms;
    if (typeof e.time_ns === "number") return e.time_ns / 1e6;
    if (typeof e.time === "number") return e.time > 1e12 ? e.time : e.time * 1000;
    return null;
  }
  function renderChanges(list, note) {
    const tb = $("changes").tBodies[0];
    tb.textContent = "";
    if (!list.length) {
      const tr = tb.insertRow(-1);
      const td = tr.insertCell(-1);
      td.colSpan = 4;
      td.className = "muted";
      td.textContent = note || "none yet";
      return;
    }
    for (const e of list.slice().reverse().slice(0, 100)) {
      const tr = tb.insertRow(-1);
      const t = changeTime(e);
      const ov = e.old_version !== undefined ? e.old_version : null;
      const nv = e.new_version !== undefined ? e.new_version : e.version;
      const cells = [
        t === null ? "–" : fmtTime(t),
        String(e.source || "–"),
        (ov !== null && ov !== undefined ? ov + " → " : "") + (nv !== undefined ? nv : "–"),
        String(e.reason || ""),
      ];
      for (const c of cells) tr.insertCell(-1).textContent = c;
    }
  }
  async function pollHistory(again) {
    try {
      const r = await fetch("/history?limit=100", { cache: "no-store" });
      if (r.status === 503) {
        renderChanges([], "the store is off: no change log (" + (await errorText(r)) + ")");
      } else if (!r.ok) {
        renderChanges([], await errorText(r));
      } else {
        const h = await r.json();
        const list = h.policy_changes || h.changes || (h.policy && h.policy.changes) || [];
        renderChanges(Array.isArray(list) ? list : []);
      }
    } catch (e) {
      /* the stats poll shows the connection state */
    } finally {
      if (again) setTimeout(() => pollHistory(true), HISTORY_MS);
    }
  }

  // ------------------------------------------------------------ policy
  function showMsg(text, kind) {
    const el = $("policy-msg");
    el.textContent = text;
    el.className = "msg" + (kind ? " " + kind : "");
  }
  async function loadPolicy() {
    try {
      const r = await fetch("/policy", { cache: "no-store" });
      if (!r.ok) { showMsg(await errorText(r), "err"); return; }
      const text = await r.text();
      let pretty = text;
      try { pretty = JSON.stringify(JSON.parse(text), null, 2); } catch (e) { /* keep */ }
      $("policy-text").value = pretty;
      state.etag = r.headers.get("ETag");
      state.dirty = false;
      state.overwrite = false;
      $("apply").textContent = "Apply (PUT /policy)";
      const v = state.etag ? state.etag.replace(/"/g, "") : "?";
      setText("editor-state", "version " + v + " in force");
    } catch (e) {
      showMsg("could not load the policy: " + e, "err");
    }
  }
  async function applyPolicy() {
    const btn = $("apply");
    const body = $("policy-text").value;
    const headers = Object.assign({ "Content-Type": "application/json" }, authHeaders());
    if (state.etag && !state.overwrite) headers["If-Match"] = state.etag;
    btn.disabled = true;
    showMsg("sending…", "");
    try {
      const r = await fetch("/policy", { method: "PUT", headers, body, cache: "no-store" });
      if (r.ok) {
        let v = r.headers.get("ETag");
        try { const j = await r.json(); if (j.version !== undefined) v = String(j.version); } catch (e) { /* ok */ }
        v = v ? String(v).replace(/"/g, "") : "?";
        showMsg("Applied: version " + v + " is in force.", "ok");
        state.dirty = false;
        await loadPolicy();
      } else if (r.status === 412) {
        showMsg(await errorText(r) + "\nThe policy changed since you loaded it. Reload to see it, or press Overwrite to replace it anyway.", "err");
        state.overwrite = true;
        btn.textContent = "Overwrite (PUT without If-Match)";
      } else {
        showMsg("Refused — " + (await errorText(r)), "err");
      }
    } catch (e) {
      showMsg("could not send: " + e, "err");
    } finally {
      btn.disabled = false;
    }
  }

  // ------------------------------------------------------------ start
  function start() {
    $("pool").addEventListener("change", (ev) => { state.pool = ev.target.value; render(); });
    $("policy-text").addEventListener("input", () => {
      state.dirty = true;
      setText("editor-state", "edited, not applied");
    });
    $("apply").addEventListener("click", applyPolicy);
    $("reload").addEventListener("click", () => { showMsg("", ""); loadPolicy(); });
    window.addEventListener("resize", render);
    loadPolicy();
    pollStats();
    pollHistory(true);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
