// Approvals: the actions held for the owner's answer — the exact action, the chat that asked,
// and why it was held with the untrusted words quoted — each with Approve once / Deny; below,
// what was decided, by whom and when. Every stored string is put in as text (dom.js `h`):
// the quote is an attacker's words, and must never become markup here.

import { get, post } from "../api.js";
import { h, toast } from "../dom.js";

const OUTCOMES = {
  done: "approved — ran once",
  running: "approved — running",
  denied: "denied",
  expired: "expired — not run",
  interrupted: "approved — cut off by a restart, not run again",
};

function at(seconds) {
  return seconds ? new Date(seconds * 1000).toLocaleString() : "—";
}

function answer(item, verb, label, go) {
  const button = h("button", { type: "button", class: verb === "deny" ? "danger" : null,
    "aria-label": `${label} ${item.id}` }, label);
  button.addEventListener("click", async () => {
    for (const b of button.parentElement.querySelectorAll("button")) b.disabled = true;
    try {
      const result = await post(`/approvals/${encodeURIComponent(item.id)}/${verb}`);
      toast(result.message);
    } catch (err) {
      toast(err.message, true);
    }
    go("approvals", { t: Date.now() });  // re-read: decided or not, the list says what holds now
  });
  return button;
}

function pendingItem(item, go) {
  return h("li", { class: "approval", "data-id": item.id },
    h("code", { class: "action" }, `${item.tool} ${item.arguments}`),
    h("div", { class: "muted" }, `from ${item.session_key} (${item.chat_type}) · held ${at(item.created_at)}`
      + ` · denied unanswered at ${at(item.expires_at)} · id ${item.id}`),
    h("div", { class: "why" }, `Held because the turn had read: ${item.origin}`),
    item.quote ? h("blockquote", { class: "quote" }, item.quote) : null,
    h("div", { class: "answers" }, answer(item, "approve", "Approve once", go), answer(item, "deny", "Deny", go)));
}

function decidedRow(item) {
  return h("tr", { "data-id": item.id, "data-status": item.status },
    h("td", {}, h("code", {}, `${item.tool} ${item.arguments}`),
      item.outcome ? h("div", { class: "muted" }, item.outcome) : null),
    h("td", {}, `${item.session_key} (${item.chat_type})`),
    h("td", { class: "outcome" }, OUTCOMES[item.status] || item.status),
    h("td", { class: "by" }, item.decided_by || (item.status === "expired" ? "nobody" : "—")),
    h("td", {}, at(item.decided_at)));
}

export async function render(view, params, { go }) {
  const { approvals } = await get("/approvals");
  const waiting = approvals.filter((a) => a.status === "pending");
  const decided = approvals.filter((a) => a.status !== "pending");
  view.append(h("h1", {}, "Approvals"));
  view.append(h("p", { class: "muted" }, "Owner-power actions from turns that read words that are not yours "
    + "wait here (and in your private chat). Approve once runs exactly the action shown, once; Deny or "
    + "silence runs nothing."));
  if (!waiting.length) view.append(h("p", { class: "muted", id: "no-approvals" }, "Nothing waits for your answer."));
  else view.append(h("ul", { class: "approvals", id: "approvals-pending" }, waiting.map((a) => pendingItem(a, go))));
  view.append(h("h2", {}, "Decided"));
  if (!decided.length) {
    view.append(h("p", { class: "muted", id: "no-decided" }, "No decisions yet."));
    return;
  }
  view.append(h("div", { class: "table-scroll" }, h("table", { class: "grid", id: "approvals-decided" },
    h("thead", {}, h("tr", {}, ["Action", "From", "Outcome", "Decided by", "When"].map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, decided.map(decidedRow)))));
}
