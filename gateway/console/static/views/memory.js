// What the assistant remembers: the memory files rendered, an editor that saves with
// the etag it read (a conflict is refused, never overwritten), and a search box.

import { ApiError, get, put } from "../api.js";
import { clear, h, toast } from "../dom.js";
import { renderMarkdown } from "../md.js";

// Each hit opens what it points at: a history entry in the history timeline, a memory
// file or daily note in the editor, anything else (a conversation, a session note, a grep
// hit in the history file) as its lines, with the turns around a conversation's.
function hitLink(hit) {
  if (hit.cursor != null) return `#history?cursor=${hit.cursor}`;
  if (hit.editable) return `#memory?path=${encodeURIComponent(hit.path)}`;
  const start = hit.start_line || hit.line || 1;
  const lines = hit.end_line && hit.start_line ? hit.end_line - hit.start_line + 1 : 1;
  return `#memory?open=${encodeURIComponent(hit.path)}&start=${start}&lines=${lines}`;
}

export async function render(view, params, { go }) {
  const files = await get("/memory/files");
  const current = params.get("path") || "memory/MEMORY.md";  // the facts: what people look up most
  const list = h("ul", { class: "file-list" }, files.map((f) => h("li", {},
    h("a", { href: `#memory?path=${encodeURIComponent(f.path)}`, "aria-current": f.path === current ? "page" : null },
      f.path, f.kind === "daily" ? h("span", { class: "muted" }, " (daily)") : null))));
  const query = h("input", { type: "search", id: "memory-search", placeholder: "Search memory and history", "aria-label": "Search memory" });
  const results = h("div", { class: "search-results", id: "search-results" });
  const searchForm = h("form", { class: "search", role: "search" }, query, h("button", { type: "submit" }, "Search"));
  searchForm.addEventListener("submit", async (e) => {
    e.preventDefault();
    clear(results);
    if (!query.value.trim()) return;
    const found = await get(`/memory/search?q=${encodeURIComponent(query.value.trim())}`);
    results.append(h("p", { class: "muted" }, `${found.hits.length} match(es)`),
      h("ul", {}, found.hits.map((hit) => h("li", {}, h("a", { href: hitLink(hit) }, `${hit.path}:${hit.line}`), " ", hit.text))));
  });
  const pane = h("div", { class: "file-pane", id: "file-pane" });
  view.append(h("h1", {}, "Memory"), searchForm, results, h("div", { class: "split" }, h("nav", { "aria-label": "Memory files" }, list), pane));

  const opened = params.get("open");
  if (opened) {  // a conversation hit: its lines with the turns around them, read-only
    const start = Number(params.get("start")) || 1;
    const lines = Number(params.get("lines")) || 20;
    const shown = await get(`/memory/open?path=${encodeURIComponent(opened)}&start=${start}&lines=${lines}`);
    pane.append(h("div", { class: "toolbar" }, h("h2", { id: "file-title" }, opened)),
      h("pre", { id: "opened-hit", class: "opened" }, shown.text));
    return;
  }
  let doc = await get(`/memory/file?path=${encodeURIComponent(current)}`);

  function show() {
    clear(pane);
    const edit = h("button", { type: "button", id: "edit-file" }, "Edit");
    edit.addEventListener("click", editor);
    pane.append(h("div", { class: "toolbar" }, h("h2", { id: "file-title" }, doc.path), edit),
      doc.exists ? renderMarkdown(doc.text) : h("p", { class: "muted" }, "This file does not exist yet."));
  }

  function editor() {
    clear(pane);
    const area = h("textarea", { id: "editor", class: "editor", "aria-label": `Edit ${doc.path}`, spellcheck: "false" });
    area.value = doc.text;
    const save = h("button", { type: "submit", id: "save-file" }, "Save");
    const cancel = h("button", { type: "button", class: "quiet", onclick: show }, "Cancel");
    const note = h("p", { class: "error", role: "alert", id: "save-error" });
    const form = h("form", { class: "edit-form" }, h("h2", {}, `Editing ${doc.path}`), area, h("div", { class: "row" }, save, cancel), note);
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      save.disabled = true;
      try {
        const saved = await put(`/memory/file?path=${encodeURIComponent(doc.path)}`, { text: area.value, etag: doc.etag });
        doc = await get(`/memory/file?path=${encodeURIComponent(doc.path)}`);
        show();
        if (saved.commit) {
          pane.prepend(h("p", { class: "ok", id: "save-result" }, "Saved as commit ",
            h("a", { href: `#dream?sha=${saved.commit}` }, saved.commit.slice(0, 8)), "."));
        } else toast("Saved.");
      } catch (err) {
        save.disabled = false;
        note.textContent = err instanceof ApiError && err.status === 409
          ? `${err.message}. Your text is still here: copy it, then reload.` : err.message;
      }
    });
    pane.append(form);
    area.focus();
  }

  show();
}
