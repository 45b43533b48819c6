// The Dream log: every memory commit, its coloured per-file diff (unified or side by
// side), restore with confirmation, and "Run Dream now" with live progress.

import { get, post } from "../api.js";
import { clear, h, toast, when } from "../dom.js";

let sideBySide = false;

function unified(file) {
  return h("table", { class: "diff" }, h("tbody", {}, file.hunks.map((hunk) => [
    h("tr", { class: "hunk" }, h("td", { colspan: 3 }, hunk.header)),
    hunk.lines.map((l) => h("tr", { class: l.op === "+" ? "add" : l.op === "-" ? "del" : "ctx" },
      h("td", { class: "ln" }, l.old ?? ""), h("td", { class: "ln" }, l.new ?? ""),
      h("td", { class: "code" }, h("span", { class: "op", "aria-hidden": "true" }, l.op), l.text))),
  ])));
}

function split(file) {
  const rows = [];
  for (const hunk of file.hunks) {
    rows.push(h("tr", { class: "hunk" }, h("td", { colspan: 2 }, hunk.header)));
    let dels = [];
    let adds = [];
    const flush = () => {
      for (let i = 0; i < Math.max(dels.length, adds.length); i += 1) {
        const d = dels[i];
        const a = adds[i];
        rows.push(h("tr", {}, h("td", { class: d ? "code del" : "code" }, d ? d.text : ""),
          h("td", { class: a ? "code add" : "code" }, a ? a.text : "")));
      }
      dels = [];
      adds = [];
    };
    for (const l of hunk.lines) {
      if (l.op === "-") dels.push(l);
      else if (l.op === "+") adds.push(l);
      else {
        flush();
        rows.push(h("tr", { class: "ctx" }, h("td", { class: "code" }, l.text), h("td", { class: "code" }, l.text)));
      }
    }
    flush();
  }
  return h("table", { class: "diff split" }, h("tbody", {}, rows));
}

function diffView(detail) {
  return h("div", { class: "diff-files" }, detail.diff.map((file) => h("section", { class: "diff-file" },
    h("h3", {}, file.path, h("span", { class: "badge" }, file.status)),
    h("div", { class: "diff-scroll" }, sideBySide ? split(file) : unified(file)))));
}

export async function render(view, params, { go }) {
  const commits = await get("/dream/commits");
  const sha = params.get("sha") || (commits[0] && commits[0].sha);
  const runButton = h("button", { type: "button", id: "run-dream" }, "Run Dream now");
  const progress = h("div", { class: "progress", id: "dream-progress", "aria-live": "polite" });
  const list = h("ol", { class: "commits", id: "commit-list" }, commits.map((c) => h("li", {},
    h("a", { href: `#dream?sha=${c.sha}`, "aria-current": c.sha === sha ? "page" : null },
      h("span", { class: `badge kind-${c.kind}` }, c.kind), " ", h("span", { class: "msg-text" }, c.message),
      h("div", { class: "muted" }, `${c.short} · ${when(c.when)} · ${c.files.join(", ")}`)))));
  const detailPane = h("div", { class: "commit-detail", id: "commit-detail" });
  view.append(h("div", { class: "toolbar" }, h("h1", {}, "Dream log"), runButton), progress,
    h("div", { class: "split" }, h("nav", { "aria-label": "Memory commits" }, list), detailPane));

  async function poll() {
    const state = await get("/dream/run");
    clear(progress).append(h("ul", {}, state.progress.map((line) => h("li", {}, line))));
    if (state.running) {
      setTimeout(poll, 800);
      return;
    }
    runButton.disabled = false;
    if (state.summary) progress.append(h("pre", { id: "dream-summary" }, state.summary));
    if (state.error) progress.append(h("p", { class: "error" }, state.error));
    if (state.commit) go("dream", { sha: state.commit, ran: "1" });
  }
  runButton.addEventListener("click", async () => {
    runButton.disabled = true;
    try {
      await post("/dream/run");
      poll();
    } catch (err) {
      runButton.disabled = false;
      toast(err.message, true);
    }
  });
  if (params.get("ran")) progress.append(h("p", { class: "ok", id: "dream-done" }, "Dream finished; its changes are below."));

  if (!sha) {
    detailPane.append(h("p", {}, "No memory commits yet."));
    return;
  }
  const detail = await get(`/dream/commits/${sha}`);
  const toggle = h("button", { type: "button", class: "quiet", id: "diff-mode" }, sideBySide ? "Unified" : "Side by side");
  const restore = h("button", { type: "button", id: "restore", class: "danger" }, "Restore…");
  const confirmBox = h("div", { class: "confirm", hidden: true, id: "restore-confirm", role: "alertdialog", "aria-label": "Confirm restore" },
    h("p", {}, `Bring the memory files back to how they were before ${detail.short}? This makes a new commit; nothing is lost.`));
  const yes = h("button", { type: "button", id: "restore-yes", class: "danger" }, "Yes, restore");
  const no = h("button", { type: "button", class: "quiet", onclick: () => { confirmBox.hidden = true; restore.focus(); } }, "Cancel");
  confirmBox.append(yes, no);
  restore.addEventListener("click", () => { confirmBox.hidden = false; yes.focus(); });
  yes.addEventListener("click", async () => {
    yes.disabled = true;
    try {
      const done = await post(`/dream/commits/${detail.sha}/restore`, { confirm: true });
      toast(`Restored: commit ${done.commit.slice(0, 8)}`);
      go("dream", { sha: done.commit });
    } catch (err) {
      yes.disabled = false;
      toast(err.message, true);
    }
  });
  let diffBox = diffView(detail);
  toggle.addEventListener("click", () => {
    sideBySide = !sideBySide;
    toggle.textContent = sideBySide ? "Unified" : "Side by side";
    const next = diffView(detail);
    diffBox.replaceWith(next);
    diffBox = next;
  });
  detailPane.append(h("div", { class: "toolbar" }, h("h2", { id: "commit-title" }, detail.message), toggle,
    detail.kind === "init" ? null : restore),
  h("p", { class: "muted" }, `${detail.short} · ${when(detail.when)}`), confirmBox, diffBox);
}
