// Pictures as inline SVG built through the DOM: the attempt timeline against the lease, and
// a queue's throughput (tasks finished per window).

import { duration, h, isoTime, s, shortId } from "./dom.js";

const RUN_CLASSES = new Set(["SUCCEEDED", "FAILED", "UNKNOWN"]);

function legend(items) {
  return h("div", { class: "legend" },
    items.map(([cls, text]) => h("span", {}, h("i", { class: `l-${cls}` }), text)));
}

// One row per attempt: the lease it held (from the start to its last lease end, after
// `renewals` renewals) as a band, the run as a bar coloured by outcome, the attempt timeout
// and the kill as marks. Time runs left to right from the first reservation.
export function attemptTimeline(task, attempts, now = Date.now()) {
  if (!attempts.length) return h("p", { class: "muted" }, "No attempt yet.");
  const width = 900;
  const left = 110;
  const right = 16;
  const rowH = 34;
  const top = 8;
  const axisH = 26;
  const instants = [];
  for (const a of attempts) {
    const start = a.started_at_ms ?? a.reserved_at_ms;
    const end = a.finished_at_ms ?? now;
    instants.push(a.reserved_at_ms, start, end, a.lease_expires_at_ms, a.killed_at_ms);
    if (start !== null && task.policy) instants.push(start + task.policy.attempt_timeout_ms);
  }
  const known = instants.filter((v) => typeof v === "number");
  const t0 = Math.min(...known);
  const t1 = Math.max(...known, t0 + 1);
  const x = (t) => left + ((t - t0) / (t1 - t0)) * (width - left - right);
  const height = top + rowH * attempts.length + axisH;
  const svg = s("svg", { viewBox: `0 0 ${width} ${height}`, width: "100%", role: "img",
    "aria-label": "attempt timeline", "data-chart": "timeline" });
  attempts.forEach((a, i) => {
    const y = top + i * rowH;
    const start = a.started_at_ms ?? a.reserved_at_ms;
    const end = a.finished_at_ms ?? now;
    const g = s("g", { "data-attempt": a.id });
    g.append(s("text", { x: 4, y: y + 15 }, `#${a.attempt_number} ${shortId(a.id)}`));
    g.append(s("text", { x: 4, y: y + 28, class: "muted" }, a.outcome || a.state));
    if (start !== null && a.lease_expires_at_ms !== null) {
      g.append(s("rect", { class: "lease", x: x(start), y: y + 3, height: rowH - 10,
        width: Math.max(1, x(a.lease_expires_at_ms) - x(start)) },
        s("title", {}, `lease to ${isoTime(a.lease_expires_at_ms)} (${a.renewals} renewal(s))`)));
    }
    if (start !== null) {
      const cls = RUN_CLASSES.has(a.outcome) ? a.outcome : (a.state === "RUNNING" ? "RUNNING" : "other");
      g.append(s("rect", { class: `run-${cls}`, x: x(start), y: y + 9, height: rowH - 22,
        width: Math.max(2, x(end) - x(start)) },
        s("title", {}, `${a.outcome || a.state}: ${duration(end - start)}`)));
      if (task.policy) {
        const timeout = start + task.policy.attempt_timeout_ms;
        g.append(s("line", { class: "timeout", x1: x(timeout), x2: x(timeout), y1: y + 1,
          y2: y + rowH - 5 }, s("title", {}, `attempt timeout ${isoTime(timeout)}`)));
      }
    }
    if (a.lease_expires_at_ms !== null) {
      const le = x(a.lease_expires_at_ms);
      g.append(s("line", { class: "lease-end", x1: le, x2: le, y1: y + 1, y2: y + rowH - 5 }));
    }
    if (a.killed_at_ms !== null) {
      const k = x(a.killed_at_ms);
      g.append(s("line", { class: "kill", x1: k, x2: k, y1: y, y2: y + rowH - 4 },
        s("title", {}, `killed (${a.kill_reason}) ${isoTime(a.killed_at_ms)}`)));
      const late = k > width * 0.7;  // keep the label inside the picture
      g.append(s("text", { x: late ? k - 4 : k + 4, y: y + 28, "text-anchor": late ? "end" : "start" },
        `kill: ${a.kill_reason || "?"}`));
    }
    svg.append(g);
  });
  const axisY = top + rowH * attempts.length + 4;
  svg.append(s("line", { class: "axis", x1: left, x2: width - right, y1: axisY, y2: axisY }));
  svg.append(s("text", { x: left, y: axisY + 16 }, isoTime(t0)));
  svg.append(s("text", { x: width - right, y: axisY + 16, "text-anchor": "end" },
    `+${duration(t1 - t0)}`));
  return h("div", {}, svg, legend([["lease", "lease held"], ["SUCCEEDED", "succeeded"],
    ["FAILED", "failed"], ["UNKNOWN", "unknown outcome"], ["timeout", "attempt timeout"],
    ["kill", "kill"]]));
}

const STACK = ["SUCCEEDED", "FAILED", "CANCELLED"];

// Stacked bars, one per window, of the tasks that ended in it (oldest window left).
export function throughputChart(data) {
  const width = 420;
  const height = 110;
  const bottom = 18;
  const windows = data.windows;
  const totals = windows.map((w) => STACK.reduce((n, st) => n + (w.counts[st] || 0), 0));
  const max = Math.max(1, ...totals);
  const barW = (width - 30) / windows.length;
  const y = (n) => ((height - bottom - 14) * n) / max;
  const sum = totals.reduce((a, b) => a + b, 0);
  const svg = s("svg", { viewBox: `0 0 ${width} ${height}`, width: "100%", role: "img",
    "aria-label": "throughput", "data-chart": "throughput", "data-total": sum });
  windows.forEach((w, i) => {
    let base = height - bottom;
    for (const st of STACK) {
      const n = w.counts[st] || 0;
      if (!n) continue;
      const hgt = y(n);
      base -= hgt;
      svg.append(s("rect", { class: `bar-${st}`, x: 30 + i * barW + 1, y: base,
        width: Math.max(1, barW - 2), height: hgt },
        s("title", {}, `${isoTime(w.from_at_ms)}: ${n} ${st.toLowerCase()}`)));
    }
  });
  svg.append(s("line", { class: "axis", x1: 30, x2: width, y1: height - bottom,
    y2: height - bottom }));
  svg.append(s("text", { x: 0, y: 12 }, String(max)));
  svg.append(s("text", { x: 0, y: height - bottom }, "0"));
  svg.append(s("text", { x: 30, y: height - 4 },
    `last ${duration(data.window_ms * windows.length)}, ${duration(data.window_ms)} per bar`));
  svg.append(s("text", { x: width, y: height - 4, "text-anchor": "end" }, `${sum} finished`));
  return h("div", {}, svg, legend([["SUCCEEDED", "succeeded"], ["FAILED", "failed"],
    ["CANCELLED", "cancelled"]]));
}
