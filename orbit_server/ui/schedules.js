// The schedules page (#/schedules?queue=…): each schedule of the queue with its cron, its
// zone and its next five fire times in that zone (the server computes them: `next_fires`).

import { get } from "./api.js";
import { h, isoTime, table } from "./dom.js";
import { currentQueue, noQueue, queueSelect, taskLink } from "./pages.js";

function nextFires(schedule) {
  if (!schedule.next_fires) return h("span", { class: "warn" }, "unreadable here");
  return h("ol", { class: "fires", "data-fires": schedule.id },
    schedule.next_fires.map((f) => h("li", { title: isoTime(f.at_ms), "data-at": f.at_ms },
      f.local)));
}

export async function renderSchedules(ctx) {
  const queue = currentQueue(ctx);
  if (!queue) return noQueue();
  const answer = await get(`/v1/queues/${queue}/schedules`);
  const rows = answer.schedules.map((s) => h("tr", { "data-schedule": s.id },
    h("td", { class: "mono", title: s.id }, s.name || s.id),
    h("td", { class: "mono" }, s.cron, s.with_seconds ? h("div", { class: "muted" }, "seconds first") : null),
    h("td", {}, s.timezone),
    h("td", {}, s.state),
    h("td", { class: "mono" }, `${s.task.handler} ${s.task.handler_version}/${s.task.payload_version}`),
    h("td", {}, s.state === "PAUSED" ? h("div", { class: "muted" }, "if resumed now:") : null,
      nextFires(s)),
    h("td", { class: "num" }, String(s.fired)),
    h("td", {}, s.last_task_id ? taskLink(s.last_task_id) : "")));
  return h("div", {}, h("h1", {}, "Schedules"),
    h("form", { class: "filters card", onsubmit: (e) => e.preventDefault() },
      queueSelect(ctx, queue, (id) => ctx.navigate("schedules", { queue: id }))),
    h("div", { class: "card" },
      table(["schedule", "cron", "time zone", "state", "task", "next five fire times (local)",
        "fired", "last task"], rows, { id: "schedule-table" }),
      rows.length ? null : h("p", { class: "muted", id: "schedules-empty" },
        "No schedule on this queue.")));
}
