// The limits page (#/limits?queue=…): the queue's flow-control limits (docs/flow-control.md),
// each pattern with its running bound, its rate and who changed it last.

import { get } from "./api.js";
import { h, isoTime, table } from "./dom.js";
import { currentQueue, noQueue, queueSelect } from "./pages.js";

function rateText(limit) {
  return limit.rate ? `${limit.rate.count} per ${limit.rate.interval_ms} ms` : "—";
}

export async function renderLimits(ctx) {
  const queue = currentQueue(ctx);
  if (!queue) return noQueue();
  const answer = await get(`/v1/queues/${queue}/limits`);
  const rows = answer.limits.map((l) => h("tr", { "data-limit": l.pattern },
    h("td", { class: "mono" }, l.pattern,
      l.wildcard ? h("div", { class: "muted" }, "each key its own limit") : null),
    h("td", { class: "num" }, l.max_running === null ? "—" : String(l.max_running)),
    h("td", {}, rateText(l)),
    h("td", {}, l.updated_by),
    h("td", {}, isoTime(l.updated_at_ms))));
  return h("div", {}, h("h1", {}, "Limits"),
    h("form", { class: "filters card", onsubmit: (e) => e.preventDefault() },
      queueSelect(ctx, queue, (id) => ctx.navigate("limits", { queue: id }))),
    h("div", { class: "card" },
      table(["pattern", "max running", "rate", "changed by", "changed"], rows,
        { id: "limit-table" }),
      rows.length ? null : h("p", { class: "muted", id: "limits-empty" },
        "No limit on this queue: its tasks start as workers take them.")));
}
