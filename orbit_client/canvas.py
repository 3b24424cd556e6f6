"""The canvas: workflows built from signatures (docs/workflows.md).

    from orbit_client import chain, chord, group
    flow = chord(group(encode.s(part) for part in parts), join.s({}))
    handle = orbit.submit(flow)          # a Workflow handle (workflow_handle.py)

A signature is ``TaskType.s(payload, **submit_options)``. ``chain(a, b, c)`` runs each after
the one before (every sink of a feeds every source of b), ``group(sigs)`` runs its members
side by side, ``chord(header, callback)`` runs the callback once the header ended; they nest
(a chain of groups is a chain of chords). ``Graph`` is the general builder, with keys you
choose and an ``on_failure`` per edge. Everything compiles to the body of
``POST /v1/queues/{queue_id}/workflows`` (``workflow_body``) with stable node keys: a node's
key is its position ("0", "1.3", ...), or a Graph node's own key under that position.

Pure: no I/O, no clock. Refusals are OrbitApiError BAD_REQUEST, raised before anything is
sent.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from orbit_wire.errors import ErrorCode
from orbit_wire.limits import MAX_NODE_KEY_LEN as MAX_KEY_LEN
from orbit_wire.limits import MAX_WORKFLOW_NODES
from orbit_wire.tasktype import Signature

from .errors import OrbitApiError

__all__ = [
    "MAX_WORKFLOW_NODES",
    "Canvas",
    "Chain",
    "Chord",
    "Graph",
    "Group",
    "OnFailure",
    "chain",
    "chord",
    "group",
    "workflow_body",
]

MAX_NAME_LEN = 128
_KEY = re.compile(rf"[A-Za-z0-9_.:-]{{1,{MAX_KEY_LEN}}}")
OnFailure = Literal["cancel", "run"]
ON_FAILURE = ("cancel", "run")


@dataclass(slots=True)
class _Node:
    key: str
    spec: dict[str, Any]
    parents: list[tuple[str, str]] = field(default_factory=list)


@dataclass(slots=True)
class _Fragment:
    """A compiled piece: its nodes (parents before children), and the keys a following
    step hangs on (``exits``) or a preceding one feeds (``entries``)."""

    nodes: list[_Node]
    entries: list[str]
    exits: list[str]


class Canvas:
    """A workflow shape: Signature, Chain, Group, Chord or Graph. ``a | b`` is chain(a, b)."""

    def _compile(self, path: str) -> _Fragment:
        raise NotImplementedError

    def __or__(self, other: Step) -> Chain:
        return chain(self, other)

    def __ror__(self, other: Step) -> Chain:
        return chain(other, self)


Step: TypeAlias = "Signature[Any, Any] | Canvas"


def _compile(step: Step, path: str) -> _Fragment:
    if isinstance(step, Signature):
        key = path or "0"
        return _Fragment([_Node(key, step.spec())], [key], [key])
    if isinstance(step, Canvas):
        return step._compile(path)
    raise _bad(f"a workflow step must be a signature (TaskType.s(...)) or a canvas "
               f"(chain, group, chord, Graph), not {type(step).__name__}")


def _child(path: str, index: int | str) -> str:
    return f"{path}.{index}" if path else str(index)


def _check_on_failure(on_failure: str) -> str:
    if on_failure not in ON_FAILURE:
        raise _bad(f"on_failure must be 'cancel' or 'run', not {on_failure!r}")
    return on_failure


class Chain(Canvas):
    """Steps one after the other; ``on_failure`` is the edges' rule ("cancel": a failed step
    cancels the rest; "run": the next step runs anyway and receives the failure)."""

    def __init__(self, steps: Iterable[Step], on_failure: OnFailure = "cancel") -> None:
        self.steps = list(steps)
        self.on_failure = _check_on_failure(on_failure)

    def _compile(self, path: str) -> _Fragment:
        nodes: list[_Node] = []
        entries: list[str] = []
        exits: list[str] = []
        for index, step in enumerate(self.steps):
            piece = _compile(step, _child(path, index))
            if not piece.nodes:
                continue  # an empty step (an empty group) passes the previous sinks on
            by_key = {node.key: node for node in piece.nodes}
            for key in piece.entries:
                by_key[key].parents.extend((parent, self.on_failure) for parent in exits)
            if not nodes:
                entries = piece.entries
            nodes.extend(piece.nodes)
            exits = piece.exits
        return _Fragment(nodes, entries, exits)

    def __repr__(self) -> str:
        return f"chain({', '.join(map(repr, self.steps))})"


class Group(Canvas):
    """Steps side by side; as a chain's step, every member waits for the step before and
    the step after waits for every member (results in the members' order)."""

    def __init__(self, steps: Iterable[Step]) -> None:
        self.steps = list(steps)

    def _compile(self, path: str) -> _Fragment:
        nodes: list[_Node] = []
        entries: list[str] = []
        exits: list[str] = []
        for index, step in enumerate(self.steps):
            piece = _compile(step, _child(path, index))
            nodes.extend(piece.nodes)
            entries.extend(piece.entries)
            exits.extend(piece.exits)
        return _Fragment(nodes, entries, exits)

    def __repr__(self) -> str:
        return f"group({', '.join(map(repr, self.steps))})"


class Chord(Chain):
    """A header (usually a group) and a callback that runs once the header ended and
    receives its results in order (``execution.parents``)."""

    def __init__(self, header: Step, callback: Step, on_failure: OnFailure = "cancel"
                 ) -> None:
        super().__init__([header, callback], on_failure)

    def __repr__(self) -> str:
        return f"chord({self.steps[0]!r}, {self.steps[1]!r})"


ParentRef = str | tuple[str, str] | Mapping[str, str]


class Graph(Canvas):
    """Any acyclic graph, node by node: ``add(key, signature, parents=[...])``, parents
    added first (which keeps the graph acyclic). A parent is a key, ``(key, on_failure)``
    or ``{"key": k, "on_failure": "run"}``; ``on_failure`` sets the default for the node's
    edges."""

    def __init__(self) -> None:
        self._nodes: dict[str, tuple[Signature[Any, Any], list[tuple[str, str]]]] = {}

    def add(self, key: str, step: Signature[Any, Any], parents: Sequence[ParentRef] = (),
            on_failure: OnFailure = "cancel") -> str:
        """Add a node; returns its key (to name it as a later node's parent)."""
        _check_key(key)
        if key in self._nodes:
            raise _bad(f"node key {key!r} is used twice")
        if not isinstance(step, Signature):
            raise _bad(f"node {key!r}: a Graph node is a signature (TaskType.s(...))")
        default = _check_on_failure(on_failure)
        edges: list[tuple[str, str]] = []
        for parent in parents:
            if isinstance(parent, str):
                name, rule = parent, default
            elif isinstance(parent, tuple) and len(parent) == 2:
                name, rule = parent
            elif isinstance(parent, Mapping) and isinstance(parent.get("key"), str):
                name, rule = parent["key"], parent.get("on_failure", default)
            else:
                raise _bad(f"node {key!r}: a parent is a key, (key, on_failure) or "
                           f"{{'key', 'on_failure'}}, not {parent!r}")
            if name not in self._nodes:
                raise _bad(f"node {key!r}: parent {name!r} is not in the graph (add parents "
                           "first)")
            if any(name == seen for seen, _ in edges):
                raise _bad(f"node {key!r}: parent {name!r} is named twice")
            edges.append((name, _check_on_failure(rule)))
        self._nodes[key] = (step, edges)
        return key

    def __len__(self) -> int:
        return len(self._nodes)

    def _compile(self, path: str) -> _Fragment:
        def full(key: str) -> str:
            return _child(path, key)

        nodes = [_Node(full(key), step.spec(), [(full(p), rule) for p, rule in edges])
                 for key, (step, edges) in self._nodes.items()]
        has_child = {parent for _, edges in self._nodes.values() for parent, _ in edges}
        entries = [full(key) for key, (_, edges) in self._nodes.items() if not edges]
        exits = [full(key) for key in self._nodes if key not in has_child]
        return _Fragment(nodes, entries, exits)

    def __repr__(self) -> str:
        return f"Graph({len(self._nodes)} nodes)"


def chain(*steps: Step, on_failure: OnFailure = "cancel") -> Chain:
    """Each step after the one before; a step is a signature or any canvas."""
    return Chain(steps, on_failure)


def group(*steps: Step | Iterable[Step]) -> Group:
    """Steps side by side: ``group(a, b)`` or ``group(sig for sig in ...)``."""
    if len(steps) == 1 and not isinstance(steps[0], Signature | Canvas):
        return Group(steps[0])
    return Group(steps)  # type: ignore[arg-type]  # each a Step, checked when compiled


def chord(header: Step | Iterable[Step], callback: Step, on_failure: OnFailure = "cancel"
          ) -> Chord:
    """``callback`` once every step of ``header`` ended (an iterable header is a group).
    ``on_failure="run"``: the callback runs even when members failed, and receives it."""
    if not isinstance(header, Signature | Canvas):
        header = Group(header)
    return Chord(header, callback, on_failure)


def workflow_nodes(canvas: Step) -> list[dict[str, Any]]:
    """The ``nodes`` of the POST body: keys, task specs and parents in declared order."""
    piece = _compile(canvas, "")
    if not piece.nodes:
        raise _bad("a workflow needs at least one task")
    if len(piece.nodes) > MAX_WORKFLOW_NODES:
        raise _bad(f"a workflow holds at most {MAX_WORKFLOW_NODES} nodes, not "
                   f"{len(piece.nodes)}")
    seen: set[str] = set()
    out = []
    for node in piece.nodes:
        _check_key(node.key)
        if node.key in seen:
            raise _bad(f"node key {node.key!r} is used twice")
        seen.add(node.key)
        parents: list[Any] = [key if rule == "cancel" else {"key": key, "on_failure": rule}
                              for key, rule in node.parents]
        out.append({"key": node.key, "task": node.spec, "parents": parents})
    return out


def workflow_body(canvas: Step, *, name: str | None = None,
                  operation_key: str | None = None) -> dict[str, Any]:
    """The body of ``POST /v1/queues/{queue_id}/workflows``."""
    body: dict[str, Any] = {"nodes": workflow_nodes(canvas)}
    if name is not None:
        if not isinstance(name, str) or len(name) > MAX_NAME_LEN:
            raise _bad(f"a workflow name is at most {MAX_NAME_LEN} characters")
        body["name"] = name
    if operation_key is not None:
        body["operation_key"] = operation_key
    return body


def _check_key(key: object) -> None:
    if not isinstance(key, str) or not _KEY.fullmatch(key):
        raise _bad(f"a node key is 1-{MAX_KEY_LEN} characters of [A-Za-z0-9_.:-], "
                   f"not {key!r}")


def _bad(message: str) -> OrbitApiError:
    return OrbitApiError(ErrorCode.BAD_REQUEST, message)
