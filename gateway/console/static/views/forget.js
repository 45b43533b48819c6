// Forget: remove a text from everything the assistant reads and keep it forgotten; the list of
// what was forgotten with un-forget. Purging the history of changes asks first, with a warning.

import { ApiError, del, get, post } from "../api.js";
import { h, toast, when } from "../dom.js";

const PURGE_WARNING = "Also rewrite the history of changes so no earlier version holds this text?\n\n"
  + "This cannot be undone: /dream-restore and the Dream log lose those versions of the memory files. "
  + "Backups and exports made before still hold the text.";

async function send(body) {
  try {
    return await post("/forget", body);
  } catch (err) {
    if (err instanceof ApiError && err.status === 409 && window.confirm(`${err.message}\n\nForget anyway?`)) {
      return post("/forget", { ...body, confirm: true });
    }
    throw err;
  }
}

export async function render(view, params, { go }) {
  const items = await get("/forgotten");
  view.append(h("h1", {}, "Forget"));
  view.append(h("p", { class: "muted" }, "Forgetting removes the text (any case, across line wraps) from USER.md, "
    + "MEMORY.md, SOUL.md, notes, history, every open conversation and the search index, and keeps it out from "
    + "then on. Transcripts stay as records but never show it again."));
  const text = h("input", { type: "text", id: "forget-text", maxlength: 200, required: true, "aria-label": "Text to forget" });
  const purge = h("input", { type: "checkbox", id: "forget-purge" });
  const report = h("pre", { id: "forget-report", class: "report", hidden: true });
  const button = h("button", { type: "submit", class: "danger" }, "Forget");
  const form = h("form", { id: "forget-form" }, text,
    h("label", { for: "forget-purge" }, purge, " also purge the history of changes (cannot be undone)"), button);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    if (!text.value.trim()) return;
    if (purge.checked && !window.confirm(PURGE_WARNING)) return;
    button.disabled = true;
    try {
      const result = await send({ text: text.value, purge: purge.checked });
      report.textContent = result.report;
      report.hidden = false;
      text.value = "";
      toast("Forgotten.");
    } catch (err) {
      toast(err.message, true);
    } finally {
      button.disabled = false;
    }
  });
  view.append(form, report, h("h2", {}, "Forgotten"));
  if (!items.length) {
    view.append(h("p", { class: "muted", id: "no-forgotten" }, "Nothing has been forgotten."));
    return;
  }
  view.append(h("ul", { id: "forgotten" }, items.map((item) => {
    const undo = h("button", { type: "button", "aria-label": `Un-forget ${item.id}` }, "Un-forget");
    undo.addEventListener("click", async () => {
      undo.disabled = true;
      try {
        await del(`/forgotten/${encodeURIComponent(item.id)}`);
        toast(`${item.id} may be remembered again.`);
        go("forget", { t: Date.now() });
      } catch (err) {
        undo.disabled = false;
        toast(err.message, true);
      }
    });
    return h("li", { "data-id": item.id }, h("strong", {}, item.id), ` ${item.shown} · ${when(item.created)} · asked by ${item.by || "—"} `, undo);
  })));
}
