/*
 * format.js — numbers, bytes, times and histogram buckets as the dashboard
 * shows them. Pure functions.
 */

// ------------------------------------------------------------ formatting
const UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
export function fmtBytes(n) {
  if (n === undefined || n === null || !isFinite(n)) return "–";
  let u = 0;
  let v = Math.abs(n);
  while (v >= 1024 && u < UNITS.length - 1) { v /= 1024; u++; }
  const digits = u === 0 ? 0 : v >= 100 ? 0 : v >= 10 ? 1 : 2;
  // trailing zeros say nothing: "2 MiB", "1.5 KiB", "14.7 MiB"
  const text = v.toFixed(digits).replace(/\.0+$/, "").replace(/(\.\d*[1-9])0+$/, "$1");
  return (n < 0 ? "-" : "") + text + " " + UNITS[u];
}
export function fmtCount(n) {
  if (n === undefined || n === null || !isFinite(n)) return "–";
  const a = Math.abs(n);
  const t = (v, d) => v.toFixed(d).replace(/\.0$/, "");
  if (a >= 1e9) return t(n / 1e9, a >= 1e10 ? 0 : 1) + " G";
  if (a >= 1e6) return t(n / 1e6, a >= 1e7 ? 0 : 1) + " M";
  if (a >= 1e4) return t(n / 1e3, a >= 1e5 ? 0 : 1) + " k";
  return String(Math.round(n));
}
export function fmtPct(x) {
  if (x === undefined || x === null || !isFinite(x)) return "–";
  const p = x * 100;
  return (p >= 10 || p === 0 ? p.toFixed(0) : p.toFixed(1)) + " %";
}
export function fmtUptime(sec) {
  if (sec < 60) return Math.floor(sec) + " s";
  if (sec < 3600) return Math.floor(sec / 60) + " min";
  if (sec < 86400) return Math.floor(sec / 3600) + " h " + Math.floor((sec % 3600) / 60) + " min";
  return Math.floor(sec / 86400) + " d " + Math.floor((sec % 86400) / 3600) + " h";
}
export const num = (v) => (typeof v === "number" && isFinite(v) ? v : 0);
// a change in bytes as signed MiB: "-1.50 MiB", "+0.25 MiB", "0 MiB"
export function fmtDeltaMiB(d) {
  if (d === null || !isFinite(d)) return "–";
  if (d === 0) return "0 MiB";
  return (d > 0 ? "+" : "-") + (Math.abs(d) / 1048576).toFixed(2) + " MiB";
}

// core's histogram buckets: 0..3 exact, then four per doubling
export function bucketLower(i) {
  if (i < 4) return i;
  const l = Math.floor(i / 4) + 1;
  const m = i % 4;
  return (4 + m) * Math.pow(2, l - 2);
}

// a local time of day: "14:05", or "14:05:09" withSec
export function fmtClock(ms, withSec) {
  const d = new Date(ms);
  const pad = (v) => String(v).padStart(2, "0");
  return pad(d.getHours()) + ":" + pad(d.getMinutes()) + (withSec ? ":" + pad(d.getSeconds()) : "");
}
