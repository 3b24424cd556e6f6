// Flow control on the dashboard (docs/flow-control.md): a queue's pauses on its card, each
// with a resume, a pause form; and the bulk actions of the task list, which count the
// matching tasks first (a dry run) and act only once that count is confirmed.

import { post } from "./api.js";
import { h } from "./dom.js";

const OPERATORS = new Set(["admin", "producer"]);

function pauseName(p) {
  if (!p.handler) return "the queue";
  return p.handler_version ? `${p.handler} ${p.handler_version}` : p.handler;
}

// The pauses in force of a queue card, with a resume button each, and a pause form.
export function pauseControls(ctx, queueId, paused) {
  const may = OPERATORS.has(ctx.me.role);
  const items = paused.map((p) => h("li", { "data-pause": p.scope, "data-handler": p.handler || "" },
    h("span", { class: "warn" }, `paused: ${pauseName(p)}`),
    ` by ${p.paused_by}: ${p.reason} `,
    may ? h("button", { type: "button", "data-action": "resume", onclick: async () => {
      const body = {};
      if (p.handler) body.handler = p.handler;
      if (p.handler_version) body.handler_version = p.handler_version;
      try {
        await post(`/v1/queues/${queueId}/resume`, body);
        ctx.status(`resumed ${pauseName(p)}`, "ok");
        ctx.refresh();
      } catch (err) {
        ctx.status(`resume failed: ${err.code}: ${err.message}`, "error");
      }
    } }, "Resume") : null));
  if (!may) return h("ul", { class: "pauses" }, items);
  const handler = h("input", { name: "pause-handler", placeholder: "handler (empty: queue)", size: 16 });
  const version = h("input", { name: "pause-version", placeholder: "version", size: 6 });
  const reason = h("input", { name: "pause-reason", placeholder: "why (required)", size: 16 });
  const pause = async () => {
    const body = { reason: reason.value.trim() };
    if (handler.value.trim()) body.handler = handler.value.trim();
    if (version.value.trim()) body.handler_version = version.value.trim();
    try {
      await post(`/v1/queues/${queueId}/pause`, body);
      ctx.status(`paused ${pauseName(body)}`, "ok");
      ctx.clean();
      ctx.refresh();
    } catch (err) {
      ctx.status(`pause failed: ${err.code}: ${err.message}`, "error");
    }
  };
  return h("div", { class: "pauses", "data-pauses": queueId },
    h("ul", {}, items),
    h("div", { class: "review-row" }, h("label", {}, "Handler", handler),
      h("label", {}, "Version", version), h("label", {}, "Reason", reason),
      h("button", { type: "button", "data-action": "pause", onclick: pause }, "Pause")));
}

// [value, label, route, extra body]: each bulk action of the task list.
const ACTIONS = [
  ["cancel", "Cancel", "cancel", {}],
  ["retry", "Retry (FAILED, CANCELLED)", "retry", {}],
  ["review-retry", "Review: retry", "review", { action: "retry" }],
  ["review-succeed", "Review: mark succeeded", "review", { action: "succeed" }],
  ["review-fail", "Review: mark failed", "review", { action: "fail" }],
];

// The bulk bar under the task filters: the action applies to every task of the queue the
// filter selects (all pages). `filter` holds the bulk routes' query parameters.
export function bulkBar(ctx, queueId, filter) {
  if (!OPERATORS.has(ctx.me.role)) return null;
  const action = h("select", { name: "bulk-action" },
    ACTIONS.map(([v, label]) => h("option", { value: v }, label)));
  const reason = h("input", { name: "bulk-reason", placeholder: "why (audited)", size: 18 });
  const result = h("input", { name: "bulk-result", value: "{}", size: 8, class: "mono",
    title: "the result every task records with mark succeeded (JSON)" });
  const counted = h("span", { class: "muted", id: "bulk-count" });
  const confirm = h("button", { type: "button", class: "danger", id: "bulk-confirm",
    hidden: true }, "Confirm");
  const body = (dryRun) => {
    const [, , route, extra] = ACTIONS.find(([v]) => v === action.value);
    const out = { ...extra, dry_run: dryRun };
    if (reason.value.trim()) out.reason = reason.value.trim();
    if (out.action === "succeed") out.result = JSON.parse(result.value);
    return [route, out];
  };
  const send = async (dryRun) => {
    let route, payload;
    try { [route, payload] = body(dryRun); } catch {
      ctx.status("the result must be JSON", "error");
      return null;
    }
    const params = new URLSearchParams();
    for (const [k, v] of Object.entries(filter)) {
      if (v !== null && v !== undefined && v !== "") params.append(k, v);
    }
    const query = params.toString();
    return post(`/v1/queues/${queueId}/tasks/${route}${query ? "?" + query : ""}`, payload);
  };
  const count = async () => {
    confirm.hidden = true;
    try {
      const answer = await send(true);
      if (answer === null) return;
      counted.textContent = `${answer.matched} task(s) match`
        + (answer.complete ? "" : " (at least)");
      counted.dataset.matched = String(answer.matched);
      confirm.hidden = answer.matched === 0;
      // A count waits for its confirmation: auto-refresh holds meanwhile.
      counted.dispatchEvent(new Event("input", { bubbles: true }));
    } catch (err) {
      counted.textContent = "";
      ctx.status(`count failed: ${err.code}: ${err.message}`, "error");
    }
  };
  confirm.onclick = async () => {
    confirm.hidden = true;
    try {
      const answer = await send(false);
      if (answer === null) return;
      ctx.status(`${answer.action}: ${answer.changed} of ${answer.matched} task(s) changed`
        + (answer.skipped ? `, ${answer.skipped} moved on meanwhile` : ""), "ok");
      ctx.clean();
      ctx.refresh();
    } catch (err) {
      ctx.status(`bulk action failed: ${err.code}: ${err.message}`, "error");
    }
  };
  action.onchange = () => { confirm.hidden = true; counted.textContent = ""; };
  return h("div", { class: "card review-row", id: "bulk-bar" },
    h("label", {}, "Every matching task", action), h("label", {}, "Reason", reason),
    h("label", {}, "Result (JSON)", result),
    h("button", { type: "button", id: "bulk-count-button", onclick: count }, "Count"),
    counted, confirm);
}
