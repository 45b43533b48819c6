// The console's entry point: log in, then a hash router over the views.

import { ApiError, get, post, setAgent, setCsrf } from "./api.js";
import { clear, h, toast } from "./dom.js";
import * as approvals from "./views/approvals.js";
import * as chat from "./views/chat.js";
import * as dream from "./views/dream.js";
import * as forget from "./views/forget.js";
import * as historyView from "./views/history.js";
import * as jobs from "./views/jobs.js";
import * as memory from "./views/memory.js";
import * as sessions from "./views/sessions.js";
import * as status from "./views/status.js";

const VIEWS = { chat, memory, history: historyView, dream, forget, approvals, sessions, jobs, status };
let cleanup = null;

function parseHash() {
  const raw = location.hash.replace(/^#/, "");
  const [name, query] = raw.split("?");
  return { name: VIEWS[name] ? name : "chat", params: new URLSearchParams(query || "") };
}

export function go(name, params = {}) {
  const query = new URLSearchParams(params).toString();
  location.hash = query ? `${name}?${query}` : name;
}

async function route() {
  if (document.getElementById("top").hidden) return;
  const { name, params } = parseHash();
  if (cleanup) {
    try { cleanup(); } catch (_) { /* a view's cleanup must not stop navigation */ }
  }
  cleanup = null;
  for (const link of document.querySelectorAll("#nav a")) {
    if (link.dataset.view === name) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  const view = clear(document.getElementById("view"));
  view.dataset.view = name;
  try {
    cleanup = (await VIEWS[name].render(view, params, { go })) || null;
  } catch (err) {
    if (!(err instanceof ApiError && err.status === 401)) {
      view.append(h("p", { class: "error", role: "alert" }, `Could not load: ${err.message}`));
    }
  }
}

function showLogin(message = "") {
  document.getElementById("top").hidden = true;
  clear(document.getElementById("view"));
  document.getElementById("login").hidden = false;
  document.getElementById("login-error").textContent = message;
  document.getElementById("login-token").focus();
}

const AGENT_KEY = "lucid.agent";  // the agent picked in this tab (sessionStorage: not a credential)

// With several agents, a picker in the header: every view shows the agent picked, and the
// choice outlives a reload of the tab. With one agent there is no picker and nothing changes.
async function setUpAgents() {
  const box = document.getElementById("agent-box");
  const picker = document.getElementById("agent-picker");
  let agents = [];
  try {
    agents = await get("/agents");
  } catch (_) {
    agents = [];
  }
  clear(picker);
  if (agents.length < 2) {
    setAgent(null);
    box.hidden = true;
    return;
  }
  const kept = sessionStorage.getItem(AGENT_KEY);
  const chosen = agents.some((a) => a.id === kept) ? kept : agents.find((a) => a.default).id;
  setAgent(chosen);
  for (const a of agents) {
    picker.append(h("option", { value: a.id, selected: a.id === chosen }, a.default ? `${a.id} (default)` : a.id));
  }
  box.hidden = false;
}

function pickAgent(id) {
  setAgent(id);
  sessionStorage.setItem(AGENT_KEY, id);
  const { name } = parseHash();
  if (location.hash.replace(/^#/, "") === name) route();
  else go(name);  // the view afresh, without the other agent's item in its address
}

async function showApp(session) {
  setCsrf(session.csrf);
  document.getElementById("login").hidden = true;
  document.getElementById("top").hidden = false;
  await setUpAgents();
  route();
}

async function login(body) {
  try {
    await showApp(await post("/login", body));
  } catch (err) {
    showLogin(err.message);
  }
}

async function boot() {
  document.getElementById("login-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const field = document.getElementById("login-token");
    const token = field.value;
    field.value = "";
    login({ token });
  });
  document.getElementById("logout").addEventListener("click", async () => {
    try { await post("/logout"); } catch (_) { /* logged out either way */ }
    setCsrf(null);
    showLogin("Logged out.");
  });
  document.getElementById("agent-picker").addEventListener("change", (event) => pickAgent(event.target.value));
  window.addEventListener("hashchange", route);
  window.addEventListener("lucid:logged-out", () => showLogin("Your session ended; log in again."));
  const link = location.hash.match(/^#login=([A-Za-z0-9_-]+)$/);
  if (link) {
    history.replaceState(null, "", location.pathname);  // the code never stays in the address bar
    await login({ code: link[1] });
    return;
  }
  try {
    await showApp(await get("/me"));
  } catch (_) {
    showLogin();
  }
}

window.addEventListener("error", (event) => toast(`Error: ${event.message}`, true));
boot();
