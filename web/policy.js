/*
 * policy.js — the policy editor: GET /policy into the text area, PUT /policy
 * with If-Match (and the bearer token when one is entered), the server's
 * answer shown; on 412 it offers to overwrite.
 */
import { $, authHeaders, errorText, setText, state } from "./common.js";

// ------------------------------------------------------------ policy
export function showMsg(text, kind) {
  const el = $("policy-msg");
  el.textContent = text;
  el.className = "msg" + (kind ? " " + kind : "");
}
export async function loadPolicy() {
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
export async function applyPolicy() {
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
      let changed = true;
      try {
        const j = await r.json();
        if (j.version !== undefined) v = String(j.version);
        if (j.changed === false) changed = false;
      } catch (e) { /* ok */ }
      v = v ? String(v).replace(/"/g, "") : "?";
      showMsg(changed ? "Applied: version " + v + " is in force."
                      : "Nothing to apply: this is the policy in force (version " + v + ").", "ok");
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
