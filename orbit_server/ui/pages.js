// The pages. Each `render*` reads what it shows from the API and returns a node; the router
// (app.js) swaps it in and renders again on auto-refresh.

import { get, post } from "./api.js";
import { attemptTimeline, throughputChart } from "./charts.js";
import { bulkBar, pauseControls } from "./flow.js";
import {
  ago, bytes, capability, duration, facts, h, isoTime, json, shortId, stateBadge, table,
} from "./dom.js";

const STATES = ["PENDING", "RUNNING", "SUCCEEDED", "FAILED", "NEEDS_REVIEW", "CANCELLED"];
const REVIEWERS = new Set(["admin", "producer"]);
const RERUNNABLE = new Set(["FAILED", "CANCELLED"]);
// Throughput windows: [window_ms, windows, label]; the overview's `span` parameter.
const SPANS = [["1000", "60", "per second, last minute"], ["10000", "30", "per 10 s, last 5 min"],
  ["60000", "30", "per minute, last 30 min"], ["3600000", "24", "per hour, last 24 h"]];
const WITHIN = [["", "any time"], ["300000", "last 5 min"], ["3600000", "last hour"],
  ["86400000", "last 24 h"], ["604800000", "last 7 days"]];

export function taskLink(id) {
  return h("a", { href: `#/task/${id}`, class: "mono", "data-task": id, title: id }, shortId(id));
}

export function queueName(queue) {
  return queue.name ? `${queue.name} (${shortId(queue.id)})` : queue.id;
}

export function queueSelect(ctx, selected, onChange) {
  return h("label", {}, "Queue",
    h("select", { name: "queue", onchange: (e) => onChange(e.target.value) },
      ctx.queues.map((q) => h("option", { value: q.id, selected: q.id === selected }, queueName(q)))));
}

export function currentQueue(ctx) {
  const wanted = ctx.params.get("queue");
  if (wanted && ctx.queues.some((q) => q.id === wanted)) return wanted;
  return ctx.queues.length ? ctx.queues[0].id : null;
}

export function noQueue() {
  return h("div", { class: "card" }, h("p", {}, "This credential sees no queue."));
}

// ------------------------------------------------------------------ queues overview

export async function renderQueues(ctx) {
  const span = SPANS.find(([w]) => w === ctx.params.get("span")) || SPANS[2];
  const [workers, ...perQueue] = await Promise.all([
    get("/v1/workers"),
    ...ctx.queues.map((q) => Promise.all([
      get(`/v1/queues/${q.id}/stats`),
      get(`/v1/queues/${q.id}/throughput`, { window_ms: span[0], windows: span[1] }),
    ])),
  ]);
  const now = Date.now();
  const cards = ctx.queues.map((q, i) => {
    const [stats, throughput] = perQueue[i];
    const live = workers.workers.filter((w) => w.queue_id === q.id);
    const unserved = stats.capabilities.filter((c) => c.pending > 0 && c.live_workers === 0);
    return h("section", { class: "card", "data-queue": q.id },
      h("h2", {}, queueName(q)),
      h("div", { class: "counts" }, STATES.map((st) =>
        h("div", { "data-count": st }, h("b", {}, String(stats.counts[st] || 0)), stateBadge(st)))),
      facts([
        ["oldest pending", stats.oldest_pending_age_ms === null ? null
          : duration(stats.oldest_pending_age_ms)],
        ["delayed pending", String(stats.pending_delayed)],
        ["running attempts", String(stats.running_attempts)],
        ["live workers", `${live.length} (${live.reduce((n, w) => n + w.slots, 0)} slots)`],
        ["nobody serves", unserved.length
          ? h("span", { class: "warn", "data-unserved": "" },
            unserved.map((c) => `${capability(c.capability)} (${c.pending} pending)`).join(", "))
          : "—"],
        ["fair dispatch", stats.fair
          ? h("span", { "data-fair": stats.fair }, `turns by ${stats.fair}`) : "—"],
      ]),
      pauseControls(ctx, q.id, stats.paused || []),
      h("h3", {}, "Throughput"),
      throughputChart(throughput),
      h("p", {},
        h("a", { href: `#/tasks?queue=${q.id}` }, "Tasks"), " · ",
        h("a", { href: `#/review?queue=${q.id}` }, `Review (${stats.counts.NEEDS_REVIEW || 0})`),
        " · ", h("a", { href: `#/workers?queue=${q.id}` }, "Workers"),
        " · ", h("a", { href: `#/schedules?queue=${q.id}` }, "Schedules"),
        " · ", h("a", { href: `#/limits?queue=${q.id}` }, "Limits"),
        h("span", { class: "muted" }, ` · as of ${isoTime(now)}`)));
  });
  const spanSelect = h("form", { class: "filters card", onsubmit: (e) => e.preventDefault() },
    h("label", {}, "Throughput", h("select", { name: "span",
      onchange: (e) => ctx.navigate("queues", { span: e.target.value }) },
    SPANS.map(([w, , label]) => h("option", { value: w, selected: w === span[0] }, label)))));
  return h("div", {}, h("h1", {}, "Queues"), spanSelect,
    cards.length ? h("div", { class: "cards" }, cards) : noQueue());
}

// ------------------------------------------------------------------ task list

const cursorStacks = new Map();  // filter key -> cursors of the pages before this one

function parseCapability(text) {
  const m = /^([^@/\s]+)(?:@([^/\s]+))?(?:\/(\S+))?$/.exec(text.trim());
  return m ? { handler: m[1], handler_version: m[2], payload_version: m[3] } : null;
}

export async function renderTasks(ctx) {
  const queue = currentQueue(ctx);
  if (!queue) return noQueue();
  const p = ctx.params;
  const filter = {
    state: p.get("state") || "",
    capability: p.get("capability") || "",
    created_within: p.get("created_within") || "",
    finished_within: p.get("finished_within") || "",
    order: p.get("order") || "newest",
    limit: p.get("limit") || "25",
  };
  const cap = filter.capability ? parseCapability(filter.capability) : {};
  const now = Date.now();
  const params = {
    state: filter.state, order: filter.order, limit: filter.limit, cursor: p.get("cursor"),
    ...(cap || {}),
    created_after: filter.created_within ? now - Number(filter.created_within) : null,
    finished_after: filter.finished_within ? now - Number(filter.finished_within) : null,
  };
  const page = cap === null ? { tasks: [], next_cursor: null }
    : await get(`/v1/queues/${queue}/tasks`, params);
  const key = JSON.stringify({ queue, ...filter });
  const stack = cursorStacks.get(key) || [];
  cursorStacks.set(key, stack);

  const go = (changes) => ctx.navigate("tasks", { queue, ...filter, ...changes });
  const form = h("form", { class: "filters card", id: "task-filters", onsubmit: (e) => {
    e.preventDefault();
    const data = new FormData(e.target);
    ctx.navigate("tasks", Object.fromEntries(data.entries()));
  } },
  queueSelect(ctx, queue, (id) => go({ queue: id, cursor: "" })),
  h("label", {}, "State", h("select", { name: "state" },
    h("option", { value: "" }, "any"),
    STATES.map((st) => h("option", { value: st, selected: st === filter.state }, st)))),
  h("label", {}, "Capability", h("input", { name: "capability", value: filter.capability,
    placeholder: "handler[@version[/payload]]", size: 28 })),
  h("label", {}, "Submitted", h("select", { name: "created_within" },
    WITHIN.map(([v, t]) => h("option", { value: v, selected: v === filter.created_within }, t)))),
  h("label", {}, "Finished", h("select", { name: "finished_within" },
    WITHIN.map(([v, t]) => h("option", { value: v, selected: v === filter.finished_within }, t)))),
  h("label", {}, "Order", h("select", { name: "order" },
    ["newest", "oldest"].map((o) => h("option", { value: o, selected: o === filter.order }, o)))),
  h("label", {}, "Per page", h("select", { name: "limit" },
    ["5", "10", "25", "50", "100", "500"].map((n) => h("option", { value: n, selected: n === filter.limit }, n)))),
  h("button", { type: "submit", class: "primary" }, "Filter"));

  const rows = page.tasks.map((t) => h("tr", { "data-task-row": t.id },
    h("td", {}, taskLink(t.id)), h("td", {}, stateBadge(t.state)),
    h("td", { class: "mono" }, capability(t.capability)),
    h("td", { class: "num" }, String(t.priority)), h("td", { class: "num" }, String(t.attempts)),
    h("td", {}, ago(t.created_at_ms, now)), h("td", {}, ago(t.finished_at_ms, now)),
    h("td", {}, t.failure ? h("code", {}, failureText(t.failure))
      : t.waiting ? h("span", { class: "warn" }, `waiting: ${t.waiting.reason}`) : "")));
  const cursor = p.get("cursor") || "";
  const pager = h("div", { class: "pager" },
    h("button", { type: "button", id: "first-page", disabled: !cursor,
      onclick: () => { stack.length = 0; go({ cursor: "" }); } }, "First"),
    h("button", { type: "button", id: "prev-page", disabled: !cursor,
      onclick: () => go({ cursor: stack.pop() || "" }) }, "Previous"),
    h("button", { type: "button", id: "next-page", disabled: !page.next_cursor,
      onclick: () => { stack.push(cursor); go({ cursor: page.next_cursor }); } }, "Next"),
    h("span", { class: "muted", id: "page-info" },
      `page ${stack.length + 1}, ${page.tasks.length} task(s)`));
  // The bulk actions take the list's filters, not its order, page size or cursor.
  const bulkFilter = { state: params.state, handler: (cap || {}).handler,
    handler_version: (cap || {}).handler_version, payload_version: (cap || {}).payload_version,
    created_after: params.created_after, finished_after: params.finished_after };
  return h("div", {}, h("h1", {}, "Tasks"), form,
    cap === null ? h("p", { class: "error" }, "capability: handler[@version[/payload]]")
      : bulkBar(ctx, queue, bulkFilter),
    h("div", { class: "card" },
      table(["task", "state", "capability", "priority", "attempts", "submitted", "finished",
        "failure / waiting"], rows, { id: "task-table" }),
      rows.length ? null : h("p", { class: "muted" }, "No task on this page."),
      pager));
}

// ------------------------------------------------------------------ review actions

function reviewControls(ctx, task, onDone) {
  if (!REVIEWERS.has(ctx.me.role)) {
    return h("p", { class: "muted" }, "This credential may not review tasks.");
  }
  const reason = h("input", { name: "reason", placeholder: "why (audited)", size: 20 });
  const result = h("input", { name: "result", value: "{}", size: 8, class: "mono",
    title: "the result recorded by mark succeeded (JSON)" });
  const act = async (action) => {
    const body = { action };
    if (reason.value.trim()) body.reason = reason.value.trim();
    if (action === "succeed") {
      try { body.result = JSON.parse(result.value); } catch {
        ctx.status("the result must be JSON", "error");
        return;
      }
    }
    try {
      const after = await post(`/v1/tasks/${task.id}/review`, body);
      ctx.status(`task ${shortId(task.id)}: ${action} → ${after.state}`, "ok");
      ctx.clean();
      onDone();
    } catch (err) {
      ctx.status(`review failed: ${err.code}: ${err.message}`, "error");
    }
  };
  return h("div", { class: "review-row", "data-review": task.id },
    h("label", {}, "Reason", reason), h("label", {}, "Result (JSON)", result),
    h("button", { type: "button", "data-action": "retry", onclick: () => act("retry") }, "Retry"),
    h("button", { type: "button", "data-action": "succeed", onclick: () => act("succeed") },
      "Mark succeeded"),
    h("button", { type: "button", class: "danger", "data-action": "fail",
      onclick: () => act("fail") }, "Mark failed"));
}

// A FAILED or CANCELLED task run again (POST /v1/tasks/{id}/retry): a new run of its
// policy's attempts, audited with the reason.
function retryControls(ctx, task, onDone) {
  if (!REVIEWERS.has(ctx.me.role)) {
    return h("p", { class: "muted" }, "This credential may not retry tasks.");
  }
  const reason = h("input", { name: "reason", placeholder: "why (audited)", size: 20 });
  const retry = async () => {
    const body = reason.value.trim() ? { reason: reason.value.trim() } : {};
    try {
      const after = await post(`/v1/tasks/${task.id}/retry`, body);
      ctx.status(`task ${shortId(task.id)}: retried → ${after.state}`, "ok");
      ctx.clean();
      onDone();
    } catch (err) {
      ctx.status(`retry failed: ${err.code}: ${err.message}`, "error");
    }
  };
  return h("div", { class: "review-row", "data-retry": task.id },
    h("p", { class: "muted" }, `Runs it again with ${task.policy.max_attempts} more attempt(s); `
      + "the attempts so far stay in its history."),
    h("label", {}, "Reason", reason),
    h("button", { type: "button", class: "primary", "data-action": "rerun", onclick: retry },
      "Retry"));
}

export async function renderReview(ctx) {
  const queue = currentQueue(ctx);
  if (!queue) return noQueue();
  const page = await get(`/v1/queues/${queue}/tasks`,
    { state: "NEEDS_REVIEW", order: "oldest", limit: 50, cursor: ctx.params.get("cursor") });
  const ids = page.tasks.map((t) => t.id);
  const histories = await Promise.all(ids.map((id) => get(`/v1/tasks/${id}/attempts`)));
  const now = Date.now();
  const rows = page.tasks.map((t, i) => {
    const last = histories[i].attempts.at(-1);
    return h("tr", { "data-task-row": t.id },
      h("td", {}, taskLink(t.id)), h("td", { class: "mono" }, capability(t.capability)),
      h("td", {}, last ? h("code", {}, `${last.outcome || last.state} ${last.code || ""}`) : ""),
      h("td", {}, last && last.kill_reason ? h("code", {}, last.kill_reason) : ""),
      h("td", {}, last ? h("code", {}, last.decision_rule || "") : ""),
      h("td", {}, ago(t.updated_at_ms, now)),
      h("td", {}, reviewControls(ctx, t, () => ctx.refresh())));
  });
  return h("div", {}, h("h1", {}, "Review queue"),
    h("form", { class: "filters card", onsubmit: (e) => e.preventDefault() },
      queueSelect(ctx, queue, (id) => ctx.navigate("review", { queue: id }))),
    h("div", { class: "card" },
      table(["task", "capability", "last attempt", "kill reason", "rule", "in review since",
        "resolve"], rows, { id: "review-table" }),
      rows.length ? null : h("p", { class: "muted", id: "review-empty" }, "Nothing to review."),
      page.next_cursor ? h("p", {}, h("a", {
        href: `#/review?queue=${queue}&cursor=${encodeURIComponent(page.next_cursor)}` },
      "More")) : null));
}

// ------------------------------------------------------------------ one task

// A failure's cause, with the exception's type name when an exception caused it.
function failureText(failure) {
  const kind = failure.details && failure.details.exception_type;
  return kind ? `${failure.code}: ${kind}` : failure.code;
}

// An attempt's latest progress: a bar (a native <progress>, no inline style under the
// CSP) with its percentage, the details beside it, when it was reported as the tooltip.
function progressCell(progress) {
  if (!progress) return "";
  const { fraction, details, at_ms: at } = progress;
  const shown = fraction === null ? "-" : `${Math.round(fraction * 100)}%`;
  return h("div", { class: "progress", "data-progress": fraction === null ? "" : String(fraction),
    title: `reported ${isoTime(at)}` },
  fraction === null ? null : h("progress", { max: "1", value: String(fraction) }),
  h("span", { class: "num" }, shown),
  details === null || details === undefined ? null : h("div", { class: "muted" }, json(details)));
}

export async function renderTask(ctx, id) {
  const [task, history, audit] = await Promise.all([
    get(`/v1/tasks/${id}`), get(`/v1/tasks/${id}/attempts`), get(`/v1/tasks/${id}/audit`)]);
  const now = Date.now();
  const attemptRows = history.attempts.map((a) => h("tr", { "data-attempt-row": a.id },
    h("td", { class: "num" }, String(a.attempt_number)), h("td", { class: "mono" }, shortId(a.id)),
    h("td", {}, a.state), h("td", {}, a.outcome ? h("code", {}, `${a.outcome} ${a.code || ""}`) : ""),
    h("td", { class: "mono" }, shortId(a.instance_id)),
    h("td", { class: "num" }, a.child_pid === null ? "" : String(a.child_pid)),
    h("td", {}, isoTime(a.started_at_ms)), h("td", {}, isoTime(a.finished_at_ms)),
    h("td", { class: "num" }, a.started_at_ms === null ? ""
      : duration((a.finished_at_ms ?? now) - a.started_at_ms)),
    h("td", { class: "num" }, a.cpu_ms === null ? "" : duration(a.cpu_ms)),
    h("td", { class: "num" }, bytes(a.peak_rss_bytes)),
    h("td", { class: "num" }, String(a.renewals)),
    h("td", {}, progressCell(a.progress)),
    h("td", {}, a.signal === null ? (a.exit_code === null ? "" : `exit ${a.exit_code}`)
      : `signal ${a.signal}`),
    h("td", { "data-kill-reason": a.kill_reason || "" }, a.kill_reason ? h("code", {}, a.kill_reason) : ""),
    h("td", { class: "num" }, a.kill_after_lease_end_ms === null ? ""
      : duration(a.kill_after_lease_end_ms)),
    h("td", { class: "num" }, a.reap_ms === null ? "" : duration(a.reap_ms)),
    h("td", {}, a.decision ? h("code", {}, a.decision) : ""),
    h("td", {}, a.decision_rule ? h("code", {}, a.decision_rule) : "")));
  const evidenceRows = history.evidence.map((e) => h("tr", {},
    h("td", { class: "mono" }, shortId(e.attempt_id)), h("td", {}, isoTime(e.received_at_ms)),
    h("td", { class: "mono" }, shortId(e.instance_id)),
    h("td", {}, h("code", {}, `${e.outcome || ""} ${e.code || ""}`)), h("td", {}, e.reason || ""),
    h("td", {}, e.details ? json(e.details) : "")));
  const auditRows = audit.events.map((ev) => h("tr", { "data-audit": ev.kind },
    h("td", {}, isoTime(ev.at_ms)), h("td", { class: "mono" }, ev.actor),
    h("td", {}, h("code", {}, ev.kind)),
    h("td", {}, ev.from_state || ev.to_state ? `${ev.from_state || ""} → ${ev.to_state || ""}` : ""),
    h("td", { class: "mono" }, ev.attempt_id ? shortId(ev.attempt_id) : ""),
    h("td", {}, ev.detail && Object.keys(ev.detail).length ? json(ev.detail) : "")));
  const policy = task.policy;
  return h("div", {},
    h("h1", {}, "Task ", h("span", { class: "mono", id: "task-id" }, task.id), " ",
      stateBadge(task.state)),
    h("section", { class: "card" }, facts([
      ["queue", h("a", { href: `#/tasks?queue=${task.queue_id}`, class: "mono" }, task.queue_id)],
      ["capability", h("code", {}, capability(task.capability))],
      ["attempts", `${task.attempts} of ${task.attempt_limit ?? policy.max_attempts} (${policy.idempotency})`],
      ["lease / timeout", `${duration(policy.lease_ttl_ms)} lease, ${duration(policy.attempt_timeout_ms)} per attempt`],
      ["policy from", task.policy_source ?? null],
      ["priority", String(task.priority)],
      ["submitted", ago(task.created_at_ms, now)],
      ["finished", ago(task.finished_at_ms, now)],
      ["next attempt", task.next_attempt_at_ms === null ? null : ago(task.next_attempt_at_ms, now)],
      ["operation key", task.operation_key],
      // A workflow's node: its workflow (the graph) and its key there.
      ["workflow", task.workflow_id ? h("span", {}, h("a", { href: `#/workflow/${task.workflow_id}`,
        class: "mono", id: "task-workflow", title: task.workflow_id }, shortId(task.workflow_id)),
        ` node ${task.node_key}`) : undefined],
      ["failure", task.failure ? h("div", {}, h("code", { id: "failure-code" }, task.failure.code),
        json(task.failure.details)) : null],
      ["progress timeout", policy.progress_timeout_ms == null ? null
        : duration(policy.progress_timeout_ms)],
      // What the next attempt resumes from: the last details of one that did not succeed.
      ["checkpoint", task.checkpoint == null ? null : json(task.checkpoint)],
      ["waiting", !task.waiting ? null : task.waiting.key
        ? `${task.waiting.reason}: ${task.waiting.key} (${task.waiting.bound} ${task.waiting.max} of ${task.waiting.limit})`
        : `${task.waiting.reason}${task.waiting.requires
          ? ` (requires ${labelsText(task.waiting.requires)})` : ""} since ${isoTime(task.waiting.since)}`],
      ["requires", task.policy.requires ? labelsText(task.policy.requires) : null],
      // A handler that returned None succeeded with a null result: shown as null.
      ["result", task.state === "SUCCEEDED" ? json(task.result ?? null)
        : task.result === null || task.result === undefined ? null : json(task.result)],
    ])),
    task.state === "NEEDS_REVIEW" ? h("section", { class: "card" }, h("h2", {}, "Review"),
      reviewControls(ctx, task, () => ctx.refresh())) : null,
    RERUNNABLE.has(task.state) ? h("section", { class: "card" }, h("h2", {}, "Run again"),
      retryControls(ctx, task, () => ctx.refresh())) : null,
    h("section", { class: "card" }, h("h2", {}, "Attempt timeline"),
      attemptTimeline(task, history.attempts, now)),
    h("section", { class: "card" }, h("h2", {}, "Attempts"),
      table(["#", "attempt", "state", "outcome", "instance", "pid", "started", "ended",
        "ran", "CPU", "peak RSS", "renewals", "progress", "signal / exit", "kill reason",
        "kill after lease end", "reap", "decision", "rule"], attemptRows, { id: "attempts" })),
    evidenceRows.length ? h("section", { class: "card" }, h("h2", {}, "Evidence"),
      h("p", { class: "muted" }, "Reports that arrived when their attempt was no longer authoritative."),
      table(["attempt", "received", "instance", "outcome", "reason", "details"], evidenceRows,
        { id: "evidence" })) : null,
    h("section", { class: "card" }, h("h2", {}, "Audit trail"),
      table(["at", "actor", "event", "state", "attempt", "detail"], auditRows, { id: "audit" })));
}

// ------------------------------------------------------------------ workers

// {gpu: "a100"} as "gpu=a100" (pairs by name, joined by commas; "" for none).
const labelsText = (labels) => Object.keys(labels || {}).sort()
  .map((k) => `${k}=${labels[k]}`).join(",");

export async function renderWorkers(ctx) {
  const queue = ctx.params.get("queue") || null;
  const answer = await get("/v1/workers", { queue_id: queue });
  const names = new Map(ctx.queues.map((q) => [q.id, queueName(q)]));
  const now = Date.now();
  const rows = answer.workers.map((w) => h("tr", { "data-worker": w.instance_id },
    h("td", { class: "mono" }, shortId(w.instance_id)),
    h("td", {}, names.get(w.queue_id) || w.queue_id),
    h("td", { class: "mono" }, w.replica || ""), h("td", { class: "mono" }, w.version || ""),
    h("td", {}, w.capabilities.map((c) => h("div", { class: "mono" }, capability(c)))),
    h("td", { class: "mono", "data-labels": labelsText(w.labels) }, labelsText(w.labels) || "-"),
    h("td", { class: "num" }, `${w.running.length} / ${w.slots}`),
    h("td", { class: "num" }, String(w.credit)),
    h("td", {}, ago(w.connected_at_ms, now)), h("td", {}, ago(w.last_heartbeat_at_ms, now)),
    h("td", {}, w.running.length ? w.running.map((r) => h("div", {}, taskLink(r.task_id),
      r.child_pid === null ? "" : ` pid ${r.child_pid}`, ` for ${duration(r.running_ms)}`))
      : h("span", { class: "muted" }, "idle"))));
  return h("div", {}, h("h1", {}, "Live workers"),
    h("div", { class: "card" },
      table(["instance", "queue", "replica", "version", "capabilities", "labels", "busy / slots",
        "credit", "connected", "heartbeat", "running attempts"], rows, { id: "workers" }),
      rows.length ? null : h("p", { class: "muted" }, "No live worker.")));
}
