// The workflows pages: the queue's workflows (#/workflows?queue=…&state=…) and one workflow
// (#/workflow/<id>): its graph in layers (a node one layer below its deepest parent), each
// node with its state, parents, why it waits or was cancelled, and its task's attempts.

import { get, post } from "./api.js";
import { ago, h, shortId, stateBadge, table } from "./dom.js";
import { currentQueue, noQueue, queueSelect, taskLink } from "./pages.js";

const STATES = ["RUNNING", "BLOCKED", "SUCCEEDED", "FAILED", "CANCELLED"];
const ENDED = new Set(["SUCCEEDED", "FAILED", "CANCELLED"]);
const ORDER = ["WAITING", "PENDING", "RUNNING", "NEEDS_REVIEW", "SUCCEEDED", "FAILED", "CANCELLED"];
// Reading every node's task shows its attempts; a bigger graph links to the tasks instead.
const MAX_TASK_READS = 200;

export function workflowLink(id, text) {
  return h("a", { href: `#/workflow/${id}`, class: "mono", "data-workflow": id, title: id },
    text || shortId(id));
}

function counts(c) {
  const known = ORDER.filter((s) => c && c[s]);
  return known.length ? known.map((s) => `${c[s]} ${s}`).join(", ") : "—";
}

function parentKey(p) {
  return typeof p === "string" ? p : p.key;
}

function layers(nodes) {
  const layer = new Map();
  for (const node of nodes) {
    const depths = (node.parents || []).map((p) => layer.get(parentKey(p)) ?? 0);
    layer.set(node.key, depths.length ? 1 + Math.max(...depths) : 0);
  }
  return layer;
}

function note(node) {
  if (node.cause && node.cause.code) {
    return h("code", { "data-cause": node.cause.code },
      `${node.cause.code}${node.cause.parent_key ? ` (parent ${node.cause.parent_key})` : ""}`);
  }
  if (node.blocked_by) {
    return h("span", { class: "warn", "data-blocked-by": node.blocked_by },
      `blocked: ${node.blocked_by} needs review`);
  }
  return node.state === "WAITING" ? h("span", { class: "muted" }, "waits for its parents") : "";
}

function parents(node) {
  return (node.parents || []).map((p) => typeof p === "string" || p.on_failure !== "run"
    ? parentKey(p) : `${p.key} (runs on failure)`).join(", ");
}

export async function renderWorkflows(ctx) {
  const queue = currentQueue(ctx);
  if (!queue) return noQueue();
  const state = STATES.includes(ctx.params.get("state")) ? ctx.params.get("state") : "";
  const query = state ? `?state=${state}` : "";
  const answer = await get(`/v1/queues/${queue}/workflows${query}`);
  const now = Date.now();
  const rows = answer.workflows.map((w) => h("tr", { "data-workflow-row": w.workflow_id },
    h("td", {}, workflowLink(w.workflow_id, w.name || shortId(w.workflow_id))),
    h("td", {}, stateBadge(w.state)), h("td", {}, counts(w.counts)),
    h("td", {}, ago(w.created_at_ms, now)), h("td", {}, ago(w.ended_at_ms, now))));
  return h("div", {}, h("h1", {}, "Workflows"),
    h("form", { class: "filters card", onsubmit: (e) => e.preventDefault() },
      queueSelect(ctx, queue, (id) => ctx.navigate("workflows", { queue: id })),
      h("label", {}, "State", h("select", {
        name: "state", onchange: (e) => ctx.navigate("workflows", { queue, state: e.target.value }),
      }, [h("option", { value: "" }, "any"),
        STATES.map((s) => h("option", { value: s, selected: s === state }, s))]))),
    h("div", { class: "card" },
      table(["workflow", "state", "nodes", "created", "ended"], rows, { id: "workflow-table" }),
      rows.length ? null : h("p", { class: "muted", id: "workflows-empty" }, "No workflow here.")));
}

export async function renderWorkflow(ctx, id) {
  const wf = await get(`/v1/workflows/${id}`);
  const now = Date.now();
  const nodes = wf.nodes || [];
  const tasks = nodes.length <= MAX_TASK_READS
    ? await Promise.all(nodes.map((n) => get(`/v1/tasks/${n.task_id}`).catch(() => null)))
    : nodes.map(() => null);
  const depth = layers(nodes);
  const rows = nodes.map((node, i) => h("tr", { "data-node": node.key },
    h("td", { class: "mono", style: null },
      h("span", { class: "indent", "data-layer": depth.get(node.key) },
        "\u00a0\u00a0".repeat(depth.get(node.key) || 0)), node.key),
    h("td", {}, stateBadge(node.state)),
    h("td", { class: "mono" }, parents(node)),
    h("td", {}, taskLink(node.task_id)),
    h("td", { class: "num", "data-attempts": node.key },
      tasks[i] ? String(tasks[i].attempts) : ""),
    h("td", {}, note(node))));
  const cancel = ENDED.has(wf.state) || !["admin", "producer"].includes(ctx.me.role) ? null
    : h("button", {
      type: "button", id: "workflow-cancel",
      onclick: async () => {
        await post(`/v1/workflows/${id}/cancel`, { reason: "cancelled from the dashboard" });
        ctx.status("workflow cancelled");
        ctx.refresh();
      },
    }, "Cancel the workflow");
  return h("div", {},
    h("h1", {}, "Workflow ", h("span", { class: "mono", id: "workflow-id" }, wf.workflow_id), " ",
      stateBadge(wf.state)),
    h("section", { class: "card" }, h("dl", { class: "facts" },
      [["name", wf.name || "—"], ["queue", wf.queue_id], ["nodes", counts(wf.counts)],
        ["created", ago(wf.created_at_ms, now)], ["ended", ago(wf.ended_at_ms, now)]]
        .map(([k, v]) => [h("dt", {}, k), h("dd", { "data-fact": k }, v)])), cancel),
    h("section", { class: "card" }, h("h2", {}, "Graph"),
      h("p", { class: "muted" }, "Each node one layer below its deepest parent."),
      table(["node", "state", "parents", "task", "attempts", "note"], rows, { id: "workflow-graph" })));
}
