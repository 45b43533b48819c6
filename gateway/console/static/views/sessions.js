// Sessions: the list, one transcript (tool calls collapsed, attachments named), /new.

import { get, post } from "../api.js";
import { h, toast, when } from "../dom.js";
import { renderMarkdown } from "../md.js";

function line(m) {
  const parts = [h("div", { class: "meta" }, m.role + (m.name ? ` · ${m.name}` : "") + (m.timestamp ? ` · ${when(m.timestamp)}` : ""))];
  if (m.role === "tool") {
    parts.push(h("details", { class: "tools" }, h("summary", {}, `result of ${m.name || "a tool"}`), h("pre", {}, m.content)));
  } else if (m.content) {
    parts.push(m.role === "assistant" ? renderMarkdown(m.content) : h("div", { class: "text" }, m.content));
  }
  if (m.tool_calls.length) {
    parts.push(h("details", { class: "tools" }, h("summary", {}, `${m.tool_calls.length} tool call(s): ${m.tool_calls.map((c) => c.name).join(", ")}`),
      m.tool_calls.map((c) => h("div", { class: "tool" }, h("div", { class: "tool-name" }, c.name), h("pre", {}, c.arguments)))));
  }
  if (m.attachments.length) parts.push(h("div", { class: "muted" }, `attached: ${m.attachments.join(", ")}`));
  return h("li", { class: `msg ${m.role === "user" ? "user" : m.role === "assistant" ? "assistant" : "toolmsg"}` }, parts);
}

export async function render(view, params, { go }) {
  const key = params.get("key");
  if (key) {
    const t = await get(`/sessions/transcript?key=${encodeURIComponent(key)}`);
    const fresh = h("button", { type: "button", id: "session-new" }, "/new");
    fresh.addEventListener("click", async () => {
      try {
        await post(`/sessions/new?key=${encodeURIComponent(key)}`);
        toast("Sent /new: the conversation is archived to memory and starts fresh.");
      } catch (err) { toast(err.message, true); }
    });
    const chatLink = key.startsWith("web:") ? h("a", { href: `#chat?chat=${encodeURIComponent(key.slice(4))}` }, "Open in chat") : null;
    view.append(h("div", { class: "toolbar" }, h("a", { href: "#sessions" }, "← Sessions"), h("h1", {}, key), chatLink, fresh),
      h("p", { class: "muted" }, `${t.messages.length} message(s); the first ${t.archived} are archived to memory.`),
      h("ol", { class: "transcript" }, t.messages.map(line)));
    return;
  }
  const sessions = await get("/sessions");
  view.append(h("h1", {}, "Sessions"));
  if (!sessions.length) {
    view.append(h("p", {}, "No sessions yet."));
    return;
  }
  view.append(h("div", { class: "table-scroll" }, h("table", { class: "grid", id: "sessions-table" },
    h("thead", {}, h("tr", {}, ["Session", "Channel", "Chat", "Last activity", "Messages", "Tokens (30 d)"].map((t, i) =>
      h("th", { scope: "col", class: i === 1 || i === 2 ? "opt" : null }, t)))),
    h("tbody", {}, sessions.map((s) => h("tr", {},
      h("td", {}, h("a", { href: `#sessions?key=${encodeURIComponent(s.key)}` }, s.key)),
      h("td", { class: "opt" }, s.channel), h("td", { class: "opt" }, s.chat_id), h("td", {}, when(s.last_activity)),
      h("td", { class: "num" }, s.messages), h("td", { class: "num" }, s.tokens.toLocaleString())))))));
}
