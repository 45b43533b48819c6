// The history timeline by day: Dream's cursor marked, unprocessed entries highlighted,
// filters by session and channel, each entry linked to its transcript. `cursor=N` (a search
// hit's link) starts the page at entry N and marks it.

import { get } from "../api.js";
import { h } from "../dom.js";

export async function render(view, params, { go }) {
  const q = new URLSearchParams();
  for (const key of ["session", "channel"]) if (params.get(key)) q.set(key, params.get(key));
  const target = Number(params.get("cursor")) || null;
  if (target) q.set("before", String(target + 1));
  const page = await get(`/history?${q}`);
  const session = h("select", { "aria-label": "Session filter", id: "history-session" },
    h("option", { value: "" }, "all sessions"),
    page.sessions.map((s) => h("option", { value: s, selected: s === params.get("session") }, s)));
  const channels = [...new Set(page.sessions.map((s) => s.split(":")[0]))];
  const channel = h("select", { "aria-label": "Channel filter", id: "history-channel" },
    h("option", { value: "" }, "all channels"),
    channels.map((c) => h("option", { value: c, selected: c === params.get("channel") }, c)));
  const apply = () => {
    const next = {};
    if (session.value) next.session = session.value;
    if (channel.value) next.channel = channel.value;
    go("history", next);
  };
  session.addEventListener("change", apply);
  channel.addEventListener("change", apply);
  view.append(h("div", { class: "toolbar" }, h("h1", {}, "History"), session, channel),
    h("p", { class: "muted" }, `Dream has processed up to #${page.dream_cursor}; ${page.unprocessed} entr${page.unprocessed === 1 ? "y is" : "ies are"} waiting.`));
  if (!page.entries.length) {
    view.append(h("p", {}, "No history yet: conversations land here when they are archived."));
    return;
  }
  let day = null;
  let list = null;
  let marked = false;
  for (const entry of page.entries) {
    if (entry.day !== day) {
      day = entry.day;
      list = h("ol", { class: "timeline" });
      view.append(h("h2", { class: "day" }, day || "undated"), list);
    }
    if (!marked && entry.processed && page.entries.some((e) => !e.processed)) {
      marked = true;
      list.append(h("li", { class: "cursor-mark", id: "dream-cursor" }, `Dream cursor — #${page.dream_cursor}`));
    }
    const classes = ["entry", entry.processed ? "" : "unprocessed", entry.cursor === target ? "target" : ""];
    list.append(h("li", { class: classes.filter(Boolean).join(" "), id: `entry-${entry.cursor}`,
      "aria-current": entry.cursor === target ? "true" : null },
      h("div", { class: "meta" }, `#${entry.cursor} · ${entry.timestamp.slice(11) || ""} · `,
        entry.session_key ? h("a", { href: `#sessions?key=${encodeURIComponent(entry.session_key)}` }, entry.session_key) : "no session",
        entry.processed ? "" : h("span", { class: "badge" }, "not yet dreamt"),
        entry.archived ? h("span", { class: "badge quiet" }, "archive") : ""),
      h("div", { class: "content" }, entry.content)));
  }
}
