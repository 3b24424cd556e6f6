"""Schemathesis hooks (``SCHEMATHESIS_HOOKS=support.schemathesis_hooks``) for the rules of
the API that no schema can state, each named in the schema's description: a cron
expression's and a time zone's meaning (croniter and zoneinfo; a six-field cron only with
``with_seconds``), an instant that must lie in the future (``expires_at_ms``) or at most 31
days ahead (``not_before_at_ms``), an opaque cursor (only one the list returned), and the
value rules inside a payload or result (64-bit integers), a workflow's graph (unique node
keys, parents that exist, no cycle). A long poll's ``wait_ms`` is cut
to 50 ms so a bounded run stays short (the wait itself is tested elsewhere).

Every case passes here before it is sent (every phase). Only a value the schema admits is
changed, and only into another value the schema admits, so a negative case stays negative.
"""

from __future__ import annotations

import re
import time
from typing import Any

import schemathesis

from orbit_server.cron import Cron
from orbit_server.domain.listing import decode_cursor
from orbit_server.domain.workflows import decode_cursor as decode_workflow_cursor
from orbit_wire.errors import OrbitError
from orbit_wire.limits import INT64_MAX, INT64_MIN, MAX_DELAY_MS

_DAY_MS = 86_400_000


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _is_int(value: object) -> bool:
    """An integer as JSON Schema counts them (7.0 too)."""
    if isinstance(value, float):
        return value.is_integer()
    return isinstance(value, int) and not isinstance(value, bool)


def _in_int64(value: Any) -> Any:
    """``value`` with every integer outside signed 64-bit replaced by 0."""
    if isinstance(value, int) and not INT64_MIN <= value <= INT64_MAX:
        return 0
    if isinstance(value, list):
        return [_in_int64(item) for item in value]
    if isinstance(value, dict):
        return {key: _in_int64(item) for key, item in value.items()}
    return value


def _printable(value: object, max_len: int) -> bool:
    return (isinstance(value, str) and 0 < len(value) <= max_len and value.isascii()
            and value.isprintable())


def _fix_spec(spec: Any) -> None:
    if not isinstance(spec, dict):
        return
    at = spec.get("not_before_at_ms")
    if _is_int(at) and 0 <= at <= 2**53 and at - _now_ms() > MAX_DELAY_MS // 2:
        spec["not_before_at_ms"] = _now_ms()
    if "payload" in spec:
        spec["payload"] = _in_int64(spec["payload"])


def _fix_schedule(body: dict[str, Any]) -> None:
    zone = body.get("timezone")
    if _printable(zone, 64):
        try:
            Cron("* * * * *", zone)
        except OrbitError:
            body["timezone"] = "UTC"
    if _printable(body.get("cron"), 128):
        seconds = body.get("with_seconds") is True
        try:
            Cron(body["cron"], "UTC", seconds)
        except OrbitError:  # six fields, seconds first, only with with_seconds
            body["cron"] = "0 */5 * * * *" if seconds else "*/5 * * * *"
    _fix_spec(body.get("task"))


_NODE_KEY = re.compile(r"[A-Za-z0-9_.:-]{1,128}")


def _node_key(value: object) -> str | None:
    """The key a parent entry names, if the schema admits the entry (else None: a bad entry
    is left as it is, so a negative case stays negative)."""
    if isinstance(value, dict):
        if set(value) - {"key", "on_failure"} or value.get("on_failure", "cancel") not in (
                "cancel", "run"):
            return None
        value = value.get("key")
    return value if isinstance(value, str) and _NODE_KEY.fullmatch(value) else None


def _fix_workflow(body: Any) -> None:
    """A workflow's graph made one the server accepts (a schema cannot say it): node keys
    unique, and each node's parents earlier nodes named once (so no cycle)."""
    if not isinstance(body, dict) or not isinstance(body.get("nodes"), list):
        return
    seen: set[str] = set()
    for i, node in enumerate(body["nodes"]):
        if not isinstance(node, dict):
            continue
        _fix_spec(node.get("task"))
        parents = node.get("parents")
        if isinstance(parents, list):
            kept, named = [], set()
            for parent in parents:
                key = _node_key(parent)
                if key is None or (key in seen and key not in named):
                    kept.append(parent)  # a bad entry stays bad; a good one stays
                    if key is not None:
                        named.add(key)
            node["parents"] = [p for p in kept if _node_key(p) is None or _node_key(p) in seen]
        key = node.get("key")
        if isinstance(key, str) and _NODE_KEY.fullmatch(key):
            if key in seen:
                key = node["key"] = f"n{i}-{len(seen)}"
            seen.add(key)


def _fix_body(body: Any) -> None:
    if not isinstance(body, dict):
        return
    expires = body.get("expires_at_ms")
    if _is_int(expires) and 0 <= expires <= _now_ms() + 60_000:
        body["expires_at_ms"] = _now_ms() + _DAY_MS
    _fix_spec(body)
    if isinstance(body.get("tasks"), list):
        for spec in body["tasks"]:
            _fix_spec(spec)
    if "result" in body:
        body["result"] = _in_int64(body["result"])
    if "cron" in body:
        _fix_schedule(body)
        _fix_workflow(body.get("workflow"))
    _fix_workflow(body)


def _fix_query(query: Any) -> None:
    if not isinstance(query, dict):
        return
    wait = query.get("wait_ms")
    if isinstance(wait, str) and wait.isascii() and wait.isdigit():
        wait = int(wait)
    if _is_int(wait) and 50 < wait <= 60_000:
        query["wait_ms"] = 50
    cursor = query.get("cursor")
    if isinstance(cursor, str) and len(cursor) <= 128:
        try:
            decode_cursor(cursor, query.get("order", "newest") != "oldest")
        except OrbitError:
            try:  # a workflow list's cursor
                decode_workflow_cursor(cursor)
            except OrbitError:
                del query["cursor"]


@schemathesis.hook
def before_call(ctx: Any, case: Any, **kwargs: Any) -> None:
    _fix_body(case.body)
    _fix_query(case.query)
