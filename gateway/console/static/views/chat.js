// Chat with the assistant through the web channel: replies stream in over SSE, and a
// reconnect resumes after the last event id this tab has seen (no loss, no repeats).

import { currentAgent, get, post, withAgent } from "../api.js";
import { clear, h, toast } from "../dom.js";
import { renderMarkdown } from "../md.js";

// The chat this tab shows is kept per agent under sessionStorage "lucid.chat[.<agent>]" (not a credential).
const FIRST_CHAT = "main";
const CHAT_ID = /^[A-Za-z0-9-]{1,64}$/;  // as the server checks it
// Answered here, never sent: which chat this tab talks in is the tab's own choice.
const LOCAL = [
  { name: "sessions", summary: "list the web chats (this one is marked)" },
  { name: "switch", summary: "move to another chat, or start one: /switch NAME" },
];

// A readable name for a new chat: the minute it was started ("chat-20261126-1808").
function newChatId(taken) {
  const d = new Date();
  const pad = (n) => String(n).padStart(2, "0");
  const base = `chat-${d.getFullYear()}${pad(d.getMonth() + 1)}${pad(d.getDate())}-${pad(d.getHours())}${pad(d.getMinutes())}`;
  let id = base;
  for (let n = 2; taken.has(id); n += 1) id = `${base}-${n}`;
  return id;
}

function toolList(tools) {
  if (!tools || !tools.length) return null;
  return h("details", { class: "tools" },
    h("summary", {}, `${tools.length} tool call${tools.length > 1 ? "s" : ""}: ${tools.map((t) => t.name).join(", ")}`),
    tools.map((t) => h("div", { class: "tool" },
      h("div", { class: "tool-name" }, t.name),
      h("pre", {}, t.arguments),
      t.result ? h("pre", { class: "tool-result" }, t.result) : null)));
}

export async function render(view, params, { go }) {
  const KEY = `lucid.chat${currentAgent() ? `.${currentAgent()}` : ""}`;
  const [chats, served] = await Promise.all([get("/chats"), get("/commands")]);
  const commands = served.concat(LOCAL);
  // A new tab continues the most recent chat (the list comes most recent first); only
  // "New chat" (or /switch) starts another one.
  const chatId = params.get("chat") || sessionStorage.getItem(KEY) || (chats.length ? chats[0].chat_id : FIRST_CHAT);
  sessionStorage.setItem(KEY, chatId);
  const picker = h("select", { id: "chat-picker", "aria-label": "Chat" });
  const ids = new Set(chats.map((c) => c.chat_id).concat([chatId]));
  for (const id of ids) picker.append(h("option", { value: id, selected: id === chatId }, id));
  picker.addEventListener("change", () => go("chat", { chat: picker.value }));
  const fresh = h("button", { type: "button", class: "quiet", onclick: () => go("chat", { chat: newChatId(ids) }) }, "New chat");
  const log = h("div", { class: "chat-log", id: "chat-log", role: "log", "aria-live": "polite" });
  const typing = h("div", { class: "typing", id: "typing", hidden: true }, "The assistant is typing…");
  const input = h("textarea", { id: "chat-input", rows: 2, placeholder: "Message, or / for commands", "aria-label": "Message", list: "commands" });
  const hints = h("div", { class: "hints", id: "command-hints" });
  const send = h("button", { type: "submit", id: "chat-send" }, "Send");
  const form = h("form", { class: "composer" }, input, send);
  view.append(h("div", { class: "chat" },
    h("div", { class: "toolbar" }, h("h1", {}, "Chat"), picker, fresh),
    log, typing, hints, form));

  const seen = new Set();
  let lastId = 0;
  let pending = null;

  function bubble(cls, body) {
    const el = h("div", { class: `msg ${cls}` }, body);
    log.append(el);
    log.scrollTop = log.scrollHeight;
    return el;
  }

  function onEvent(event) {
    if (seen.has(event.id)) return;
    seen.add(event.id);
    lastId = Math.max(lastId, event.id);
    if (event.type === "user") {
      bubble("user", h("div", { class: "text" }, event.text)).dataset.id = event.id;
      return;
    }
    if (pending) { pending.remove(); pending = null; }
    typing.hidden = true;
    const body = event.type === "reply" ? [toolList(event.tools), renderMarkdown(event.text)] : h("div", { class: "text" }, event.text);
    bubble(event.type === "reply" ? "assistant" : "error", body).dataset.id = event.id;
  }

  let source = null;
  function connect() {
    source = new EventSource(withAgent(`/api/console/chats/${encodeURIComponent(chatId)}/events?after=${lastId}`));
    source.addEventListener("message", (e) => onEvent(JSON.parse(e.data)));
    source.addEventListener("typing", () => { typing.textContent = "The assistant is typing…"; typing.hidden = false; });
    source.addEventListener("activity", (e) => {  // a tool step: "running grep…"
      if (typing.hidden && !pending) return;
      typing.textContent = JSON.parse(e.data).text;
      typing.hidden = false;
    });
    source.addEventListener("progress", (e) => {
      if (typing.hidden && !pending) return;  // a late preview after the reply arrived
      const text = JSON.parse(e.data).text;
      if (!pending) pending = bubble("assistant streaming", "");
      clear(pending).append(renderMarkdown(text));
      log.scrollTop = log.scrollHeight;
    });
    source.addEventListener("open", () => view.classList.remove("offline"));
    source.addEventListener("error", () => {
      view.classList.add("offline");
      if (source.readyState === EventSource.CLOSED) setTimeout(connect, 2000);  // else the browser retries itself
    });
  }
  connect();

  function showHints() {
    clear(hints);
    const text = input.value;
    if (!text.startsWith("/") || text.includes(" ")) return;
    for (const c of commands.filter((c) => `/${c.name}`.startsWith(text))) {
      hints.append(h("button", { type: "button", class: "hint", onclick: () => { input.value = `/${c.name} `; clear(hints); input.focus(); } },
        `/${c.name}`, h("span", {}, ` ${c.summary}`)));
    }
  }
  input.addEventListener("input", showHints);
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); form.requestSubmit(); }
  });
  async function local(text) {
    const [command, ...rest] = text.split(/\s+/);
    if (command === "/sessions") {
      const known = (await get("/chats")).map((c) => c.chat_id);
      if (!known.includes(chatId)) known.unshift(chatId);
      bubble("note", h("div", { class: "text" },
        ["Web chats (* = this one; /switch NAME changes):"].concat(known.map((id) => `${id === chatId ? "*" : "\u00a0"} ${id}`)).join("\n")));
      return true;
    }
    if (command !== "/switch") return false;
    const name = rest.join(" ");
    if (!CHAT_ID.test(name)) {
      bubble("error", h("div", { class: "text" }, name ? `“${name}” is not a chat name: 1-64 letters, digits or dashes.` : "Usage: /switch NAME (see /sessions)"));
    } else {
      go("chat", { chat: name });
    }
    return true;
  }

  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const text = input.value.trim();
    if (!text) return;
    if (await local(text)) {
      input.value = "";
      clear(hints);
      return;
    }
    send.disabled = true;
    try {
      await post(`/chats/${encodeURIComponent(chatId)}/messages`, { text });
      input.value = "";
      clear(hints);
    } catch (err) {
      toast(err.message, true);
    } finally {
      send.disabled = false;
      input.focus();
    }
  });
  input.focus();
  return () => source && source.close();
}
