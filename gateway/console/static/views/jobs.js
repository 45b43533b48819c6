// Jobs and usage: reminders (cancel one), Dream and heartbeat with their next runs, and
// tokens per day stacked by job as an inline SVG chart with the daily budget line.

import { del, get } from "../api.js";
import { h, svg, toast, when } from "../dom.js";

const COLOURS = ["c0", "c1", "c2", "c3", "c4", "c5"];

function chart(usage) {
  const jobs = Object.keys(usage.by_job).sort();
  const width = 640;
  const height = 220;
  const pad = { l: 56, r: 8, t: 10, b: 28 };
  const peak = Math.max(1, ...usage.days.map((d) => d.total), usage.daily_budget || 0);
  const bw = (width - pad.l - pad.r) / usage.days.length;
  const y = (v) => pad.t + (height - pad.t - pad.b) * (1 - v / peak);
  const root = svg("svg", { viewBox: `0 0 ${width} ${height}`, class: "chart", role: "img", id: "usage-chart",
    "aria-label": `Tokens per day for the last ${usage.days.length} days` });
  root.append(svg("line", { x1: pad.l, x2: width - pad.r, y1: y(0), y2: y(0), class: "axis" }),
    svg("text", { x: pad.l - 6, y: y(peak) + 4, class: "tick", "text-anchor": "end" }, peak.toLocaleString()),
    svg("text", { x: pad.l - 6, y: y(0), class: "tick", "text-anchor": "end" }, "0"));
  usage.days.forEach((day, i) => {
    let base = 0;
    jobs.forEach((job, j) => {
      const v = day.by_job[job] || 0;
      if (!v) return;
      root.append(svg("rect", { x: pad.l + i * bw + 2, width: Math.max(1, bw - 4), y: y(base + v), height: y(base) - y(base + v),
        class: `bar ${COLOURS[j % COLOURS.length]}` }, svg("title", {}, `${day.day} ${job}: ${v.toLocaleString()} tokens`)));
      base += v;
    });
    if (i % Math.ceil(usage.days.length / 7) === 0) {
      root.append(svg("text", { x: pad.l + i * bw + bw / 2, y: height - 8, class: "tick", "text-anchor": "middle" }, day.day.slice(5)));
    }
  });
  if (usage.daily_budget) {
    root.append(svg("line", { x1: pad.l, x2: width - pad.r, y1: y(usage.daily_budget), y2: y(usage.daily_budget), class: "budget" }),
      svg("text", { x: width - pad.r, y: y(usage.daily_budget) - 4, class: "tick budget-label", "text-anchor": "end" }, `daily budget ${usage.daily_budget.toLocaleString()}`));
  }
  const legend = h("ul", { class: "legend" }, jobs.map((job, j) => h("li", {}, h("span", { class: `swatch ${COLOURS[j % COLOURS.length]}` }), `${job}: ${usage.by_job[job].toLocaleString()}`)));
  return h("figure", { class: "usage" }, root, h("figcaption", {}, legend,
    h("p", { class: "muted" }, `Per-run budgets: Dream ${usage.dream_budget.toLocaleString()} tokens, heartbeat ${usage.heartbeat_budget.toLocaleString()} tokens.`)));
}

export async function render(view, params, { go }) {
  const [jobs, usage] = await Promise.all([get("/jobs"), get("/usage?days=14")]);
  view.append(h("h1", {}, "Jobs"));
  if (!jobs.scheduler_running) view.append(h("p", { class: "error" }, "The scheduler is not running in this process."));
  view.append(h("div", { class: "table-scroll" }, h("table", { class: "grid" },
    h("thead", {}, h("tr", {}, ["Job", "Next run", "Last run", "Last result"].map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, jobs.jobs.map((j) => h("tr", {}, h("td", {}, j.name + (j.enabled ? "" : " (off)") + (j.running ? " — running" : "")),
      h("td", {}, when(j.next_run)), h("td", {}, when(j.last_run)), h("td", {}, j.last_result || "—")))))));
  view.append(h("h2", {}, "Reminders"));
  if (!jobs.reminders.length) view.append(h("p", { class: "muted", id: "no-reminders" }, "No active reminders."));
  else {
    view.append(h("ul", { class: "reminders", id: "reminders" }, jobs.reminders.map((r) => {
      const cancel = h("button", { type: "button", class: "danger", "aria-label": `Cancel reminder ${r.id}` }, "Cancel");
      cancel.addEventListener("click", async () => {
        cancel.disabled = true;
        try {
          await del(`/jobs/reminders/${r.id}`);
          toast(`Reminder #${r.id} cancelled.`);
          go("jobs", { t: Date.now() });
        } catch (err) {
          cancel.disabled = false;
          toast(err.message, true);
        }
      });
      return h("li", { class: "reminder", "data-id": r.id }, h("div", {}, h("strong", {}, `#${r.id} `), r.text),
        h("div", { class: "muted" }, `${r.kind} ${r.spec} · next ${when(r.next_run)} · ${r.session_key}`), cancel);
    })));
  }
  view.append(h("h2", {}, "Token usage"), chart(usage));
}
