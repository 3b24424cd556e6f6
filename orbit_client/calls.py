"""The HTTP API as data: one function per endpoint builds a ``Call``; ``decode`` reads the answer.

Pure (no sockets, no clock), so the sync and async clients share every rule and tests can
check requests and answers without a server. A Call is sent by a transport, whose answer
(status and body bytes) goes to ``decode``, which returns the JSON value or raises
OrbitApiError.

Exact numbers: answers are parsed with orjson, which keeps integers exact within signed 64-bit
(the wire limit) but reads other numbers as floats. Calls that answer a Task therefore also
attach ``result_json``: the result's text exactly as the server sent it (None without a
result), read as a ``msgspec.Raw`` slice of the answer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
import orjson

from orbit_wire.errors import ErrorCode, OrbitError
from orbit_wire.flow import check_pattern
from orbit_wire.ids import is_id
from orbit_wire.jsonvalue import check_value
from orbit_wire.limits import MAX_SUBMIT_BATCH
from orbit_wire.model import Role, TaskState

from .errors import OrbitApiError, code_for_status

MAX_WAIT_MS = 60_000  # the server's bound on one long poll
REVIEW_ACTIONS = ("retry", "succeed", "fail")


@dataclass(frozen=True, slots=True)
class Call:
    """One request. ``wait_ms`` is how long the server may hold it (added to the read timeout);
    ``task_answer`` asks ``decode`` to attach ``result_json`` to the answered Task."""

    method: str
    path: str
    params: Mapping[str, str] | None = None
    body: bytes | None = None
    expected: tuple[int, ...] = (200,)
    wait_ms: int = 0
    task_answer: bool = False


def health() -> Call:
    return Call("GET", "/healthz")


def create_queue(name: str | None = None) -> Call:
    body: dict[str, Any] = {} if name is None else {"name": name}
    return Call("POST", "/v1/queues", body=_dumps(body), expected=(201,))


def queue_stats(queue_id: str) -> Call:
    return Call("GET", f"/v1/queues/{_id(queue_id, 'queue')}/stats")


def capabilities(queue_id: str) -> Call:
    return Call("GET", f"/v1/queues/{_id(queue_id, 'queue')}/capabilities")


def create_credential(role: str, queues: Sequence[str], name: str | None = None,
                      expires_at_ms: int | None = None) -> Call:
    try:
        role = Role(role).value
    except ValueError:
        raise _local(f"role must be one of {', '.join(r.value for r in Role)}") from None
    body: dict[str, Any] = {"role": role, "queues": [_id(q, "queue") for q in queues]}
    if name is not None:
        body["name"] = name
    if expires_at_ms is not None:
        body["expires_at_ms"] = expires_at_ms
    return Call("POST", "/v1/credentials", body=_dumps(body), expected=(201,))


def list_credentials() -> Call:
    return Call("GET", "/v1/credentials")


def rotate_credential(credential_id: str, grace_ms: int = 0,
                      expires_at_ms: int | None = None) -> Call:
    body: dict[str, Any] = {"grace_ms": grace_ms}
    if expires_at_ms is not None:
        body["expires_at_ms"] = expires_at_ms
    return Call("POST", f"/v1/credentials/{_id(credential_id, 'credential')}/rotate",
                body=_dumps(body))


def revoke_credential(credential_id: str) -> Call:
    return Call("DELETE", f"/v1/credentials/{_id(credential_id, 'credential')}")


def submit(queue_id: str, spec: Mapping[str, Any]) -> Call:
    body = spec_json(spec)
    return Call(
        "POST",
        f"/v1/queues/{queue_ref(queue_id)}/tasks",
        body=body,
        expected=(200, 201),
        task_answer=True,
    )


def submit_batch(queue_id: str, specs: Sequence[Mapping[str, Any]]) -> Call:
    body = b'{"tasks":[' + b",".join(batch_json(specs)) + b"]}"
    return Call(
        "POST",
        f"/v1/queues/{queue_ref(queue_id)}/tasks/batch",
        body=body,
        expected=(200, 201),
    )


def spec_json(spec: Mapping[str, Any]) -> bytes:
    """One TaskSpec as the JSON text a submit sends, its values checked first."""
    return _dumps(_checked_spec(spec))


def batch_json(specs: Sequence[Mapping[str, Any]]) -> list[bytes]:
    """The JSON text of each TaskSpec of a batch (1 to MAX_SUBMIT_BATCH), checked first; a
    refusal names the spec's index."""
    if not 1 <= len(specs) <= MAX_SUBMIT_BATCH:
        raise _local(f"a batch holds 1 to {MAX_SUBMIT_BATCH} task specs, not {len(specs)}")
    texts = []
    for index, spec in enumerate(specs):
        try:
            texts.append(spec_json(spec))
        except OrbitApiError as exc:
            raise OrbitApiError(exc.code, f"tasks[{index}]: {exc.message}") from None
    return texts


def queue_ref(queue_id: str) -> str:
    """``queue_id`` if it is a well-formed queue ID, else BAD_REQUEST (nothing is sent)."""
    return _id(queue_id, "queue")


def task_ref(task_id: str) -> str:
    """``task_id`` if it is a well-formed task ID, else BAD_REQUEST (nothing is sent)."""
    return _id(task_id, "task")


def get_task(task_id: str, wait_ms: int | None = None) -> Call:
    path = f"/v1/tasks/{_id(task_id, 'task')}"
    if wait_ms is None:
        return Call("GET", path, task_answer=True)
    if not 0 <= wait_ms <= MAX_WAIT_MS:
        raise _local(f"wait_ms must be 0 to {MAX_WAIT_MS}, not {wait_ms}")
    return Call("GET", path, params={"wait_ms": str(wait_ms)}, wait_ms=wait_ms, task_answer=True)


TASK_STATES = ("PENDING", "RUNNING", "SUCCEEDED", "FAILED", "NEEDS_REVIEW", "CANCELLED")
LIST_ORDERS = ("newest", "oldest")
MAX_LIST_LIMIT = 500  # the server's bound on one page


def list_tasks(
    queue_id: str, *, state: str | Sequence[str] | None = None, handler: str | None = None,
    handler_version: str | None = None, payload_version: str | None = None,
    created_after: int | None = None, created_before: int | None = None,
    finished_after: int | None = None, finished_before: int | None = None,
    order: str = "newest", limit: int = 50, cursor: str | None = None,
) -> Call:
    """One page of a queue's tasks; ``state`` is a state or several (any case). Times are
    epoch milliseconds, inclusive."""
    params = _filter_params(state, handler, handler_version, payload_version, created_after,
                            created_before, finished_after, finished_before)
    if cursor is not None:
        params["cursor"] = cursor
    if order not in LIST_ORDERS:
        raise _local("order must be newest or oldest")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIST_LIMIT:
        raise _local(f"limit must be 1 to {MAX_LIST_LIMIT}, not {limit!r}")
    params["order"] = order
    params["limit"] = str(limit)
    return Call("GET", f"/v1/queues/{_id(queue_id, 'queue')}/tasks", params=params)


def _filter_params(state: str | Sequence[str] | None, handler: str | None,
                   handler_version: str | None, payload_version: str | None,
                   created_after: int | None, created_before: int | None,
                   finished_after: int | None, finished_before: int | None) -> dict[str, str]:
    """The query parameters of a task filter (the task list's, and a bulk retry's)."""
    params: dict[str, str] = {}
    if state is not None:
        states = [state] if isinstance(state, str) else list(state)
        names = [part.strip().upper() for s in states for part in s.split(",") if part.strip()]
        bad = [n for n in names if n not in TASK_STATES]
        if bad:
            raise _local(f"state {bad[0]!r} is not one of {', '.join(TASK_STATES)}")
        if names:
            params["state"] = ",".join(dict.fromkeys(names))
    for key, text in (("handler", handler), ("handler_version", handler_version),
                      ("payload_version", payload_version)):
        if text is not None:
            params[key] = text
    for key, value in (("created_after", created_after), ("created_before", created_before),
                       ("finished_after", finished_after), ("finished_before", finished_before)):
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise _local(f"{key} must be epoch milliseconds (an integer >= 0)")
            params[key] = str(value)
    return params


def list_queues() -> Call:
    return Call("GET", "/v1/queues")


def list_workers(queue_id: str | None = None) -> Call:
    if queue_id is None:
        return Call("GET", "/v1/workers")
    return Call("GET", "/v1/workers", params={"queue_id": _id(queue_id, "queue")})


def cancel(task_id: str, reason: str | None = None) -> Call:
    body: dict[str, Any] = {} if reason is None else {"reason": reason}
    return Call(
        "POST", f"/v1/tasks/{_id(task_id, 'task')}/cancel", body=_dumps(body), task_answer=True
    )


def retry(task_id: str, reason: str | None = None) -> Call:
    """Run a FAILED or CANCELLED task again (a new run of its policy's attempts)."""
    body: dict[str, Any] = {} if reason is None else {"reason": reason}
    return Call(
        "POST", f"/v1/tasks/{_id(task_id, 'task')}/retry", body=_dumps(body), task_answer=True
    )


def retry_tasks(
    queue_id: str, *, state: str | Sequence[str] | None = None, handler: str | None = None,
    handler_version: str | None = None, payload_version: str | None = None,
    created_after: int | None = None, created_before: int | None = None,
    finished_after: int | None = None, finished_before: int | None = None,
    reason: str | None = None, dry_run: bool = False,
) -> Call:
    """Run the queue's FAILED or CANCELLED tasks the filter selects again (``dry_run``: only
    count them): ``{"matched", "retried", "skipped", "dry_run", "complete"}``."""
    params = _filter_params(state, handler, handler_version, payload_version, created_after,
                            created_before, finished_after, finished_before)
    body: dict[str, Any] = {"dry_run": bool(dry_run)}
    if reason is not None:
        body["reason"] = reason
    return Call("POST", f"/v1/queues/{_id(queue_id, 'queue')}/tasks/retry", params=params,
                body=_dumps(body))


def cancel_tasks(queue_id: str, *, reason: str | None = None, dry_run: bool = False,
                 **filters: Any) -> Call:
    """Cancel the queue's PENDING, RUNNING and NEEDS_REVIEW tasks the filter selects (the
    task list's filters; ``dry_run``: only count them): ``{"action", "matched",
    "changed", "cancelled", "skipped", "dry_run", "complete"}``."""
    return _bulk(queue_id, "cancel", {}, reason, dry_run, filters)


def review_tasks(queue_id: str, action: str, result: Any = None, *,
                 reason: str | None = None, dry_run: bool = False, **filters: Any) -> Call:
    """Resolve the queue's NEEDS_REVIEW tasks the filter selects alike (``action`` retry,
    succeed with ``result``, or fail): ``{"action", "matched", "changed", "skipped",
    "dry_run", "complete"}``."""
    body = _review_body(action, result)
    if result is None and action == "succeed":
        raise _local("succeed needs a result")
    return _bulk(queue_id, "review", body, reason, dry_run, filters)


def _bulk(queue_id: str, what: str, body: dict[str, Any], reason: str | None, dry_run: bool,
          filters: dict[str, Any]) -> Call:
    unknown = set(filters) - set(_FILTER_NAMES)
    if unknown:
        raise _local(f"unknown filter {sorted(unknown)[0]!r}")
    params = _filter_params(*(filters.get(name) for name in _FILTER_NAMES))
    body = {**body, "dry_run": bool(dry_run)}
    if reason is not None:
        body["reason"] = reason
    return Call("POST", f"/v1/queues/{_id(queue_id, 'queue')}/tasks/{what}", params=params,
                body=_dumps(body))


_FILTER_NAMES = ("state", "handler", "handler_version", "payload_version", "created_after",
                 "created_before", "finished_after", "finished_before")


def pause(queue_id: str, reason: str, handler: str | None = None,
          handler_version: str | None = None) -> Call:
    """Pause the queue, a capability (``handler``) or one of its versions: the queue's
    ``{"queue_id", "paused", "log"}``."""
    return Call("POST", f"/v1/queues/{_id(queue_id, 'queue')}/pause",
                body=_dumps(_pause_body(handler, handler_version, reason)))


def resume(queue_id: str, handler: str | None = None, handler_version: str | None = None,
           reason: str | None = None) -> Call:
    """Lift the pause of exactly this key; ``resumed`` says whether one was in force."""
    return Call("POST", f"/v1/queues/{_id(queue_id, 'queue')}/resume",
                body=_dumps(_pause_body(handler, handler_version, reason)))


def pauses(queue_id: str) -> Call:
    return Call("GET", f"/v1/queues/{_id(queue_id, 'queue')}/pauses")


def _pause_body(handler: str | None, handler_version: str | None,
                reason: str | None) -> dict[str, Any]:
    if handler_version is not None and handler is None:
        raise _local("a handler version goes with a handler")
    body: dict[str, Any] = {}
    for key, value in (("handler", handler), ("handler_version", handler_version),
                       ("reason", reason)):
        if value is not None:
            body[key] = value
    return body


def attempts(task_id: str) -> Call:
    return Call("GET", f"/v1/tasks/{_id(task_id, 'task')}/attempts")


def audit(task_id: str) -> Call:
    return Call("GET", f"/v1/tasks/{_id(task_id, 'task')}/audit")


def review(
    task_id: str, action: str, result: Any = None, reason: str | None = None
) -> Call:
    """``result`` is only meaningful with ``succeed``; pass an ``orjson.Fragment`` to send
    exact JSON text."""
    body = _review_body(action, result)
    if reason is not None:
        body["reason"] = reason
    return Call(
        "POST", f"/v1/tasks/{_id(task_id, 'task')}/review", body=_dumps(body), task_answer=True
    )


def _review_body(action: str, result: Any) -> dict[str, Any]:
    """A review's ``{"action", "result"?}``, checked: a known action, a result only with
    ``succeed``."""
    if action not in REVIEW_ACTIONS:
        raise _local(f"review action must be one of {', '.join(REVIEW_ACTIONS)}, not {action!r}")
    body: dict[str, Any] = {"action": action}
    if result is not None:
        if action != "succeed":
            raise _local("a result may only be given with the 'succeed' action")
        body["result"] = _checked_value(result, "result")
    return body


def create_schedule(queue_id: str, schedule: Mapping[str, Any]) -> Call:
    """``schedule``: {"cron", "timezone"?, "task": TaskSpec, "name"?, "missed_ticks"?,
    "paused"?} (docs/http-api.md "Schedules"); ``"workflow"``: a workflow body instead of
    ``"task"`` fires a workflow each tick."""
    if not isinstance(schedule, Mapping) or not (
            isinstance(schedule.get("task"), Mapping)
            or isinstance(schedule.get("workflow"), Mapping)):
        raise _local("a schedule must be a JSON object with a 'task' spec or a 'workflow' "
                     "body")
    body = dict(schedule)
    if isinstance(schedule.get("task"), Mapping):
        body["task"] = _checked_spec(schedule["task"])
    else:  # a workflow fired each tick (docs/workflows.md): its nodes' specs checked
        nodes = schedule["workflow"].get("nodes")
        if not isinstance(nodes, list) or not all(isinstance(n, Mapping) for n in nodes):
            raise _local("a schedule's workflow needs a 'nodes' list")
        body["workflow"] = {**schedule["workflow"], "nodes": [
            {**n, "task": _checked_spec(n.get("task"))} for n in nodes]}
    return Call("POST", f"/v1/queues/{_id(queue_id, 'queue')}/schedules", body=_dumps(body),
                expected=(201,))


def list_schedules(queue_id: str) -> Call:
    return Call("GET", f"/v1/queues/{_id(queue_id, 'queue')}/schedules")


def get_schedule(schedule_id: str) -> Call:
    return Call("GET", f"/v1/schedules/{_id(schedule_id, 'schedule')}")


def pause_schedule(schedule_id: str) -> Call:
    return Call("POST", f"/v1/schedules/{_id(schedule_id, 'schedule')}/pause")


def resume_schedule(schedule_id: str) -> Call:
    return Call("POST", f"/v1/schedules/{_id(schedule_id, 'schedule')}/resume")


def delete_schedule(schedule_id: str) -> Call:
    return Call("DELETE", f"/v1/schedules/{_id(schedule_id, 'schedule')}")


def set_limit(queue_id: str, pattern: str, max_running: int | None = None,
              rate: tuple[int, int] | None = None) -> Call:
    """A flow-control limit of the queue (docs/flow-control.md): ``pattern`` a key
    (``licence:matlab``) or ``name:*``; ``rate`` (count, interval_ms); one bound at least."""
    body: dict[str, Any] = {}
    if max_running is not None:
        body["max_running"] = max_running
    if rate is not None:
        body["rate"] = {"count": rate[0], "interval_ms": rate[1]}
    if not body:
        raise _local("a limit needs max_running, a rate or both")
    return Call("PUT", _limit_path(queue_id, pattern), body=_dumps(body), expected=(200, 201))


def get_limit(queue_id: str, pattern: str) -> Call:
    return Call("GET", _limit_path(queue_id, pattern))


def list_limits(queue_id: str) -> Call:
    return Call("GET", f"/v1/queues/{_id(queue_id, 'queue')}/limits")


def delete_limit(queue_id: str, pattern: str) -> Call:
    return Call("DELETE", _limit_path(queue_id, pattern))


def set_fair(queue_id: str, key: str) -> Call:
    """Make the queue's dispatch take turns between the values of the key name ``key``
    (docs/flow-control.md "Fair dispatch"; admin)."""
    return Call("PUT", _fair_path(queue_id), body=_dumps({"key": key}))


def fair(queue_id: str) -> Call:
    return Call("GET", _fair_path(queue_id))


def fair_off(queue_id: str) -> Call:
    return Call("DELETE", _fair_path(queue_id))


def _fair_path(queue_id: str) -> str:
    return f"/v1/queues/{_id(queue_id, 'queue')}/fair"


def _limit_path(queue_id: str, pattern: str) -> str:
    # The pattern goes into the URL path: checked here, it holds no '/', '?' or '..'.
    try:
        check_pattern(pattern)
    except OrbitError as exc:
        raise OrbitApiError(exc.code, exc.message) from None
    return f"/v1/queues/{_id(queue_id, 'queue')}/limits/{pattern}"


def decode(call: Call, status: int, body: bytes) -> dict[str, Any]:
    """The JSON object answering ``call``, or OrbitApiError with the server's code and status.

    Every endpoint answers an object; anything else is reported as INTERNAL."""
    if status not in call.expected:
        raise _error_from_answer(status, body)
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        value = None
    if not isinstance(value, dict):
        raise OrbitApiError(
            ErrorCode.INTERNAL, f"the server answered {status} without a JSON object",
            status=status, retryable=False,
        )
    if call.task_answer:
        with_result_json(value, body)
    return value


class _ResultText(msgspec.Struct):
    """A task answer's ``result`` as the exact text the server sent (the rest is skipped)."""

    result: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)


_RESULT_TEXT = msgspec.json.Decoder(_ResultText)


def with_result_json(view: dict[str, Any], text: bytes | str) -> dict[str, Any]:
    """``view`` (a task, decoded from ``text``) with ``result_json``: its result's exact
    text, or None without a result."""
    # Reading the result's own text is only needed when there is one.
    view["result_json"] = (null_result_json(view) if view.get("result") is None
                           else _result_text(text))
    return view


def null_result_json(view: dict[str, Any]) -> str | None:
    """The ``result_json`` of a view whose result is null: ``"null"`` once it SUCCEEDED (a
    handler that returned None), else None (no result)."""
    return "null" if view.get("state") == TaskState.SUCCEEDED.value else None


def _result_text(body: bytes | str) -> str | None:
    try:
        raw = bytes(_RESULT_TEXT.decode(body).result)
    except msgspec.DecodeError:
        return None
    return None if raw in (b"", b"null") else raw.decode()


def tasks_of(answer: dict[str, Any]) -> list[dict[str, Any]]:
    """The task list of a batch answer."""
    tasks = answer.get("tasks")
    if not isinstance(tasks, list) or not all(isinstance(t, dict) for t in tasks):
        raise OrbitApiError(ErrorCode.INTERNAL, "the batch answer has no task list")
    return tasks


def _error_from_answer(status: int, body: bytes) -> OrbitApiError:
    fallback = code_for_status(status)
    try:
        error = orjson.loads(body)["error"]
        code, message = error["code"], error["message"]
        retryable = error.get("retryable")
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return OrbitApiError(fallback, f"the server answered HTTP {status}", status=status)
    if not isinstance(message, str):
        message = str(message)
    if not isinstance(retryable, bool):
        retryable = None
    try:
        known = ErrorCode(code)
    except ValueError:
        # A code this client does not know yet: keep it readable, classify by status.
        return OrbitApiError(fallback, f"{code}: {message}", status=status, retryable=retryable)
    return OrbitApiError(known, message, status=status, retryable=retryable)


def _checked_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(spec, Mapping):
        raise _local("a task spec must be a JSON object")
    if "payload" not in spec:
        raise _local("a task spec needs a 'payload'")
    out = dict(spec)
    out["payload"] = _checked_value(spec["payload"], "payload")
    return out


def _checked_value(value: Any, what: str) -> Any:
    # orjson would quietly write NaN as null; check the value rules before encoding.
    if isinstance(value, orjson.Fragment):
        return value
    try:
        check_value(value, what=what)
    except OrbitError as exc:
        raise OrbitApiError(exc.code, exc.message) from None
    return value


def _dumps(value: Any) -> bytes:
    try:
        return orjson.dumps(value)
    except TypeError as exc:
        raise OrbitApiError(ErrorCode.INVALID_JSON, f"request cannot be encoded: {exc}") from None


def _id(value: str, what: str) -> str:
    # IDs go into URL paths: checking them here also keeps '/' and '..' out of the path.
    if not is_id(value):
        raise _local(f"{what} id must be a 32-character lowercase hex ID, not {value!r}")
    return value


def _local(message: str) -> OrbitApiError:
    return OrbitApiError(ErrorCode.BAD_REQUEST, message)
