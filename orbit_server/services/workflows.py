"""Workflows as producers see them (docs/http-api.md "Workflows"): submit a graph of task
nodes in one transaction, read one (its nodes, their states and what blocks them), list a
queue's, cancel one. The rules that move nodes as their parents end run inside the unit of
work of whatever transaction ended a parent (store/workflow_rows.py ``pass_on_ends``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from sqlalchemy import Connection
from sqlalchemy.exc import IntegrityError

from orbit_wire.errors import ErrorCode, OrbitError
from orbit_wire.ids import is_id, new_id
from orbit_wire.model import Role, TaskState

from .. import domain
from ..auth import Principal, queue_not_found, require_role, require_visible_queue
from ..domain import workflows as wf
from ..store import task_rows, workflow_rows
from ..store.queues import queue_exists
from ..store.retry import transactional
from ..store.rows import UnitOfWork
from .context import TxContext
from .effects import Effects
from .policies import PolicyCache
from .pushes import PushKind, record_push
from .tasks import new_task_row

_PRODUCERS = (Role.ADMIN, Role.PRODUCER)
_WAITING = TaskState.WAITING.value
_PENDING = TaskState.PENDING.value
MAX_LIST_LIMIT = 500


def workflow_not_found(workflow_id: str) -> OrbitError:
    return OrbitError(ErrorCode.NOT_FOUND, f"workflow {workflow_id} does not exist")


@transactional
class WorkflowService:
    def __init__(self, tx: TxContext, policies: PolicyCache) -> None:
        self._tx = tx
        self._policies = policies

    # ------------------------------------------------------------------ submit

    def submit(self, principal: Principal, queue_id: str, body: object, actor: str | None = None
               ) -> tuple[dict[str, Any], bool, Effects]:
        """Create the workflow and all its nodes, or nothing. Returns (Workflow view,
        created, effects); an operation key already used answers that workflow."""
        require_role(principal, _PRODUCERS)
        require_visible_queue(principal, queue_id)
        graph = wf.parse_workflow(body)
        specs = parse_specs(graph)
        effects = Effects()
        try:
            with self._tx.write() as conn:
                if not queue_exists(conn, queue_id):
                    raise queue_not_found(queue_id)
                now = self._tx.clock()
                view, created = submit_graph(conn, self._policies, queue_id, graph, specs,
                                             actor or principal.actor, now, effects)
        except IntegrityError:
            raise OrbitError(ErrorCode.UNAVAILABLE, "operation key raced; retry",
                             retryable=True) from None
        return view, created, effects

    # ------------------------------------------------------------------ reads

    def get(self, principal: Principal, workflow_id: str) -> dict[str, Any]:
        with self._tx.read() as conn:
            return _read_view(conn, _workflow_row(conn, principal, workflow_id))

    def state(self, principal: Principal, workflow_id: str) -> str:
        """The workflow's state alone, from its nodes' counts by state (one grouped read:
        what a waiting read polls, whatever the number of nodes)."""
        with self._tx.read() as conn:
            row = _workflow_row(conn, principal, workflow_id)
            counts, _ = workflow_rows.state_counts(conn, [workflow_id])
            return str(_view(row, counts[workflow_id], None, None)["state"])

    def open_sinks(self, principal: Principal, workflow_id: str, limit: int) -> list[str]:
        """Up to ``limit`` task IDs of the workflow's sinks not ended yet (what a waiting
        read watches: the workflow cannot end before they did)."""
        with self._tx.read() as conn:
            _workflow_row(conn, principal, workflow_id)
            return workflow_rows.open_sink_ids(conn, workflow_id, limit)

    def list_workflows(self, principal: Principal, queue_id: str, state: str | None,
                       limit: int, cursor: str | None) -> dict[str, Any]:
        """A queue's workflows, newest first, without their nodes. ``state`` filters the
        page read (a page may hold fewer than ``limit`` and still have a next cursor)."""
        require_role(principal, _PRODUCERS)
        require_visible_queue(principal, queue_id)
        if state is not None and state not in wf.WorkflowState.__members__:
            raise OrbitError(ErrorCode.BAD_REQUEST, "state must be one of "
                             + ", ".join(wf.WorkflowState.__members__))
        after = _cursor(cursor)
        limit = max(1, min(limit, MAX_LIST_LIMIT))
        with self._tx.read() as conn:
            if not queue_exists(conn, queue_id):
                raise queue_not_found(queue_id)
            page = workflow_rows.workflow_page(conn, queue_id, limit, after)
            counts, last = workflow_rows.state_counts(conn, [r["id"] for r in page])
            out = []
            for row in page:
                view = _view(row, counts[row["id"]], None, None, last.get(row["id"]))
                if state is None or view["state"] == state:
                    out.append(view)
        tail = page[-1] if len(page) == limit else None
        return {"workflows": out, "next_cursor": None if tail is None
                else wf.encode_cursor(tail["created_at_ms"], tail["id"])}

    # ------------------------------------------------------------------ cancel

    def cancel(self, principal: Principal, workflow_id: str, reason: str | None
               ) -> tuple[dict[str, Any], Effects]:
        """Cancel every node not ended yet (a running one through the normal cooperative
        cancel and kill); the workflow ends CANCELLED once its running nodes stopped."""
        if reason is not None and (not isinstance(reason, str) or len(reason) > 1024):
            raise OrbitError(ErrorCode.BAD_REQUEST, "reason must be a string of at most 1024 "
                             "chars")
        now = self._tx.clock()
        effects = Effects()
        with self._tx.write() as conn:
            row = _workflow_row(conn, principal, workflow_id)
            workflow_rows.set_cancelled(conn, workflow_id, now)
            open_ids = workflow_rows.open_node_ids(conn, workflow_id)
            uow = UnitOfWork(conn, now)
            uow.load_tasks(open_ids)
            attempt_ids = [t.current_attempt_id for t in uow.tasks.values()
                           if t.current_attempt_id is not None]
            uow.load_attempts(attempt_ids)
            detail: dict[str, Any] = {"workflow_id": workflow_id}
            if reason:
                detail["reason"] = reason
            for task in list(uow.tasks.values()):
                uow.workflow_seen.add(task.id)  # every open node is cancelled here
                attempt = (uow.attempts.get(task.current_attempt_id)
                           if task.current_attempt_id is not None else None)
                before = task.state
                if task.state.terminal or not domain.cancel(task, attempt, now):
                    continue
                if attempt is not None and before is TaskState.RUNNING:
                    effects.cancels.append((attempt.instance_id, attempt.id, attempt.epoch))
                    record_push(conn, now, PushKind.CANCEL, instance_id=attempt.instance_id,
                                attempt_id=attempt.id, epoch=attempt.epoch)
                uow.audit(task.id, attempt.id if attempt else None, principal.actor,
                          "task_cancelled", before, task.state, detail)
                effects.terminal_tasks.append(task.id)
            uow.flush()
            view = _read_view(conn, row)
        return view, effects


def submit_graph(conn: Connection, policies: PolicyCache, queue_id: str, graph: wf.Graph,
                 specs: Mapping[str, domain.TaskSpec], actor: str, now: int,
                 effects: Effects) -> tuple[dict[str, Any], bool]:
    """Insert a checked workflow into an existing queue in the caller's transaction (a
    submit, a schedule's firing): its row, its nodes' tasks, its edges, one executemany
    each. An operation key already used answers that workflow (created False). In a fair
    queue each node takes its turns by its own keys once a claim finds it ready."""
    if graph.operation_key is not None:
        existing = workflow_rows.find_by_operation_key(conn, queue_id, graph.operation_key)
        if existing is not None:
            return _read_view(conn, existing), False
    workflow_id = new_id(now)
    ids = {key: new_id(now) for key in graph.tasks}  # declared order: IDs grow
    rows: list[dict[str, Any]] = []
    audits: list[dict[str, Any]] = []
    edges: list[dict[str, Any]] = []
    for key in graph.tasks:
        spec = domain.resolve_policy(
            specs[key], policies.registered(conn, queue_id, specs[key].capability, now))
        row = new_task_row(queue_id, spec, now)
        parents = graph.parents[key]
        row.update(id=ids[key], workflow_id=workflow_id, node_key=key,
                   parents_left=len(parents) if parents else None)
        if parents:
            row["state"] = _WAITING
            row["start_by_at_ms"] = None  # a node's clock starts at its release
        rows.append(row)
        audits.append({"task_id": ids[key], "attempt_id": None, "at_ms": now,
                       "actor": actor, "kind": "task_submitted", "from_state": None,
                       "to_state": row["state"],
                       "detail": orjson.dumps({"workflow_id": workflow_id,
                                               "node_key": key}).decode()})
        for position, (parent, on_failure) in enumerate(parents):
            edges.append({"child_task_id": ids[key], "position": position,
                          "parent_task_id": ids[parent], "parent_key": parent,
                          "child_key": key, "workflow_id": workflow_id,
                          "on_failure": on_failure.value, "done": False})
    workflow_rows.insert_workflow(conn, {
        "id": workflow_id, "queue_id": queue_id, "name": graph.name,
        "operation_key": graph.operation_key, "node_count": len(rows),
        "created_at_ms": now, "created_by": actor[:128], "cancelled_at_ms": None,
    }, edges)
    task_rows.insert_new_tasks(conn, rows, audits)
    pending = [r for r in rows if r["state"] == _PENDING]
    if pending:
        effects.ready_queues.add(queue_id)
        effects.due(min(r["deadline_at_ms"] for r in pending))
    effects.counted().submitted.append((queue_id, len(rows)))
    made = workflow_rows.workflow_row(conn, workflow_id)
    assert made is not None
    return _read_view(conn, made), True


def parse_specs(graph: wf.Graph) -> dict[str, domain.TaskSpec]:
    """Each node's TaskSpec, checked (a refusal names the node's index)."""
    index = {key: i for i, key in enumerate(graph.tasks)}
    return {key: domain.parse_task_spec(task, f"nodes[{index[key]}].task")
            for key, task in graph.tasks.items()}


def _cursor(cursor: str | None) -> tuple[int, str] | None:
    return wf.decode_cursor(cursor) if cursor else None


def _workflow_row(conn: Connection, principal: Principal, workflow_id: str
                  ) -> Mapping[Any, Any]:
    require_role(principal, _PRODUCERS)
    row = workflow_rows.workflow_row(conn, workflow_id) if is_id(workflow_id) else None
    if row is None or not principal.may_use_queue(row["queue_id"]):
        raise workflow_not_found(workflow_id)
    return row


def _read_view(conn: Connection, row: Mapping[Any, Any]) -> dict[str, Any]:
    nodes, edges = workflow_rows.nodes_of(conn, row["id"])
    counts = Counter(n["state"] for n in nodes)
    return _view(row, dict(counts), nodes, edges)


def _view(row: Mapping[Any, Any], counts: Mapping[str, int],
          nodes: Sequence[Mapping[Any, Any]] | None,
          edges: Sequence[Mapping[Any, Any]] | None,
          last_end_ms: int | None = None) -> dict[str, Any]:
    cancelled = row["cancelled_at_ms"] is not None
    out: dict[str, Any] = {
        "workflow_id": row["id"], "queue_id": row["queue_id"], "name": row["name"],
        "operation_key": row["operation_key"], "created_at_ms": row["created_at_ms"],
        "node_count": row["node_count"],
        "counts": {s.value: counts.get(s.value, 0) for s in TaskState},
    }
    node_views: list[dict[str, Any]] = []
    blocked: dict[str, str] = {}
    ended_at: int | None = last_end_ms
    if nodes is not None and edges is not None:
        parents: dict[str, list[dict[str, str]]] = {}
        key_of = {n["id"]: n["node_key"] for n in nodes}
        for e in edges:
            parents.setdefault(key_of.get(e["child_task_id"], ""), []).append(
                {"key": e["parent_key"], "on_failure": e["on_failure"]})
        states = {n["node_key"]: n["state"] for n in nodes}
        keys = [n["node_key"] for n in nodes]
        order = wf.topological_order(keys, {k: [(p["key"], None) for p in parents.get(k, [])]
                                            for k in keys})
        for key in order:
            if states[key] == _WAITING:
                by = wf.blocked_by([p["key"] for p in parents.get(key, [])], states, blocked)
                if by is not None:
                    blocked[key] = by
        for n in nodes:
            key = n["node_key"]
            view: dict[str, Any] = {"key": key, "task_id": n["id"], "state": n["state"],
                                    "parents": parents.get(key, [])}
            if key in blocked:
                view["blocked_by"] = blocked[key]
            if n["failure_code"] == wf.PARENT_FAILED and n["failure_details"]:
                view["cause"] = {"code": wf.PARENT_FAILED,
                                 "parent_key": orjson.loads(n["failure_details"]).get(
                                     "parent_key")}
            node_views.append(view)
            if n["finished_at_ms"] is not None:
                ended_at = max(ended_at or 0, n["finished_at_ms"])
    else:
        # A list's row: blocked only when nothing else is open and one is in review.
        blocked = {"": ""} if counts.get(TaskState.NEEDS_REVIEW.value) else {}
    state = wf.workflow_state((s for s, n in counts.items() if n), cancelled, bool(blocked))
    out["state"] = state.value
    ended = state not in (wf.WorkflowState.RUNNING, wf.WorkflowState.BLOCKED)
    out["ended_at_ms"] = ended_at if ended else None
    if nodes is not None:
        out["nodes"] = node_views
    return out
