// Status: channels up or failed (and why), outbox backlog, model, version, uptime.

import { get } from "../api.js";
import { h } from "../dom.js";

function duration(s) {
  const d = Math.floor(s / 86400);
  const hr = Math.floor((s % 86400) / 3600);
  const m = Math.floor((s % 3600) / 60);
  return d ? `${d} d ${hr} h` : hr ? `${hr} h ${m} min` : `${m} min ${Math.floor(s % 60)} s`;
}

export async function render(view) {
  const s = await get("/status");
  view.append(h("h1", {}, "Status"),
    h("dl", { class: "facts" },
      h("dt", {}, "Version"), h("dd", {}, s.version),
      h("dt", {}, "Uptime"), h("dd", {}, duration(s.uptime_s)),
      h("dt", {}, "Model"), h("dd", {}, `${s.model} — `, h("span", { class: s.model_ready ? "ok" : "error" }, s.model_detail)),
      h("dt", {}, "Turns"), h("dd", {}, `${s.active_turns} running, ${s.queued_turns} queued`),
      h("dt", {}, "Memory"), h("dd", {}, `${s.unprocessed_history} history entries waiting for Dream${s.dream_running ? " (Dream running)" : ""}`)),
    h("h2", {}, "Channels"),
    h("ul", { class: "channels", id: "channels" }, s.channels.map((c) => h("li", { class: c.up ? "up" : "down" },
      h("span", { class: "dot", "aria-hidden": "true" }), h("strong", {}, c.name), ` — ${c.up ? "up" : "failed"}`,
      c.reason ? h("span", { class: "error" }, `: ${c.reason}`) : null,
      c.outbox ? h("span", { class: "muted" }, ` · outbox ${Object.entries(c.outbox).map(([k, v]) => `${k} ${v}`).join(", ") || "empty"}`) : null))));
}
