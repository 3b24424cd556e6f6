"""Human views of workflows: the list as a table, and one workflow as its graph in layers
(a node sits one layer below its deepest parent), each node with its parents, state, task
and why it waits or was cancelled.

Pure, as render.py: answers and ``now_ms`` in, rich renderables out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from .render import _table as table_of
from .render import state_text
from .timefmt import ago

WORKFLOW_STYLES = {"RUNNING": "cyan", "BLOCKED": "yellow", "SUCCEEDED": "green",
                   "FAILED": "red", "CANCELLED": "magenta"}
COUNT_ORDER = ("WAITING", "PENDING", "RUNNING", "NEEDS_REVIEW", "SUCCEEDED", "FAILED",
               "CANCELLED")


def workflow_state(state: str) -> Text:
    return Text(state, style=WORKFLOW_STYLES.get(state, ""))


def counts_words(counts: Mapping[str, Any]) -> str:
    """``3 SUCCEEDED, 1 RUNNING`` in the life order of a task; nothing counted: ``-``."""
    known = [s for s in COUNT_ORDER if counts.get(s)]
    others = sorted(s for s in counts if s not in COUNT_ORDER and counts.get(s))
    return ", ".join(f"{counts[s]} {s}" for s in known + others) or "-"


def parent_words(parents: Sequence[Any]) -> str:
    words = []
    for parent in parents:
        if isinstance(parent, str):
            words.append(parent)
        else:
            rule = parent.get("on_failure", "cancel")
            words.append(str(parent.get("key")) + (" (runs on failure)" if rule == "run"
                                                   else ""))
    return ", ".join(words) or "-"


def _parent_keys(node: Mapping[str, Any]) -> list[str]:
    return [p if isinstance(p, str) else str(p.get("key")) for p in node.get("parents") or ()]


def layers(nodes: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Each node's layer: 0 without parents, else one more than its deepest parent. The
    server sends parents before children; a parent not (yet) seen counts as layer 0."""
    layer: dict[str, int] = {}
    for node in nodes:
        parents = _parent_keys(node)
        layer[str(node.get("key"))] = 1 + max((layer.get(p, 0) for p in parents),
                                              default=-1)
    return layer


def note(node: Mapping[str, Any]) -> str:
    """Why a node waits or ended as it did, for people."""
    cause = node.get("cause")
    if isinstance(cause, Mapping) and cause.get("code"):
        parent = cause.get("parent_key")
        return f"{cause['code']}" + (f" (parent {parent})" if parent else "")
    if node.get("blocked_by"):
        return f"blocked: {node['blocked_by']} needs review"
    if node.get("state") == "WAITING":
        return "waits for its parents"
    return ""


def workflows_table(workflows: Sequence[Mapping[str, Any]], now_ms: int) -> RenderableType:
    """``orbit workflows list``: full IDs (to copy into the next command)."""
    if not workflows:
        return Text("No workflows.")
    table = table_of("id", "name", "state", "nodes", "created", "ended")
    table.columns[0].no_wrap = True
    for w in workflows:
        ended = w.get("ended_at_ms")
        table.add_row(str(w.get("workflow_id")), str(w.get("name") or "-"),
                      workflow_state(str(w.get("state"))),
                      counts_words(w.get("counts") or {}), ago(w.get("created_at_ms"), now_ms),
                      "-" if ended is None else ago(ended, now_ms))
    return table


def workflow_view(workflow: Mapping[str, Any], now_ms: int) -> RenderableType:
    """``orbit workflows get``: the facts, then every node in layers."""
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold")
    facts.add_column()
    ended = workflow.get("ended_at_ms")
    for name, value in (
        ("workflow", str(workflow.get("workflow_id"))),
        ("name", str(workflow.get("name") or "-")),
        ("queue", str(workflow.get("queue_id"))),
        ("state", workflow_state(str(workflow.get("state")))),
        ("nodes", counts_words(workflow.get("counts") or {})),
        ("created", ago(workflow.get("created_at_ms"), now_ms)),
        ("ended", "-" if ended is None else ago(ended, now_ms)),
    ):
        facts.add_row(name, value)
    nodes = workflow.get("nodes") or []
    if not nodes:
        return facts
    depth = layers(nodes)
    graph = table_of("node", "state", "parents", "task", "note", title="graph")
    for column in (0, 3, 4):  # keys, task IDs and notes read whole (the output widens)
        graph.columns[column].no_wrap = True
    for node in nodes:
        key = str(node.get("key"))
        graph.add_row("  " * depth.get(key, 0) + key, state_text(str(node.get("state"))),
                      parent_words(node.get("parents") or ()), str(node.get("task_id")),
                      note(node))
    return Group(facts, Text(""), graph)
