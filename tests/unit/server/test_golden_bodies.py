"""Request bodies (docs/http-api.md): what each parser gives for a valid body, and the exact
typed error for representative bad ones (code and message, which names the field). The
validators underneath may change; these answers may not."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from orbit_server.domain import Backoff, Policy, TaskSpec, bodies, parse_task_spec
from orbit_server.domain.schedules import MissedTicks, ScheduleSpec, parse_schedule
from orbit_wire.errors import ErrorCode, OrbitError
from orbit_wire.model import Capability, Idempotency
from orbit_wire.policy import POLICY_FIELDS, PolicySource

BASE: dict[str, Any] = {"handler": "h", "handler_version": "1", "payload_version": "1",
                        "payload": {"a": 1}}
Q = "0" * 32
W = "request body"
BAD = ErrorCode.BAD_REQUEST
RANGE, LARGE = ErrorCode.NUMBER_OUT_OF_RANGE, ErrorCode.PAYLOAD_TOO_LARGE
NAME_RULE = "is required: 1-128 of [A-Za-z0-9._:/-]"
KEY_RULE = "must be 1-255 printable ASCII characters without spaces"
NOT_NULL = "may not be null (leave it out for the default)"


def _spec(value: object) -> object:
    return parse_task_spec(value, "task")


def _without(key: str) -> dict[str, Any]:
    return {k: v for k, v in BASE.items() if k != key}


REFUSED: list[tuple[Callable[[object], object], object, ErrorCode, str]] = [
    (_spec, [BASE], BAD, "task: must be a JSON object"),
    (_spec, "x", BAD, "task: must be a JSON object"),
    (_spec, {**BASE, "payload": None}, BAD,
     "task.payload must not be null (any other JSON value, e.g. {})"),
    (_spec, _without("handler"), BAD, "task: handler is required"),
    (_spec, _without("payload"), BAD, "task: payload is required"),
    (_spec, {**BASE, "handler": None}, BAD, f"task: handler {NOT_NULL}"),
    (_spec, {**BASE, "handler": ""}, BAD, f"task: handler {NAME_RULE}"),
    (_spec, {**BASE, "handler": "a b"}, BAD, f"task: handler {NAME_RULE}"),
    (_spec, {**BASE, "handler": "h\n"}, BAD, f"task: handler {NAME_RULE}"),
    (_spec, {**BASE, "handler": "x" * 129}, BAD, f"task: handler {NAME_RULE}"),
    (_spec, {**BASE, "payload_version": 5}, BAD, f"task: payload_version {NAME_RULE}"),
    (_spec, {**BASE, "max_attempts": 0}, BAD, "task: max_attempts must be an integer in [1, 100]"),
    (_spec, {**BASE, "max_attempts": 2.5}, BAD,
     "task: max_attempts must be an integer in [1, 100]"),
    (_spec, {**BASE, "max_attempts": True}, BAD,
     "task: max_attempts must be an integer in [1, 100]"),
    (_spec, {**BASE, "max_attempts": "3"}, BAD,
     "task: max_attempts must be an integer in [1, 100]"),
    (_spec, {**BASE, "max_attempts": None}, BAD, f"task: max_attempts {NOT_NULL}"),
    (_spec, {**BASE, "idempotency": "idempotent"}, BAD,
     "task: idempotency must be one of IDEMPOTENT, NON_IDEMPOTENT"),
    (_spec, {**BASE, "backoff": []}, BAD, "task.backoff: must be a JSON object"),
    (_spec, {**BASE, "backoff": None}, BAD, f"task: backoff {NOT_NULL}"),
    (_spec, {**BASE, "backoff": {"extra": 1, "another": 2}}, BAD,
     "task.backoff: has unknown field(s): another, extra"),
    (_spec, {**BASE, "backoff": {"jitter": -0.1}}, BAD,
     "task.backoff: jitter must be a number in [0.0, 1.0]"),
    (_spec, {**BASE, "backoff": {"multiplier": float("nan")}}, BAD,
     "task.backoff: multiplier must be a number in [1.0, 10.0]"),
    (_spec, {**BASE, "backoff": {"multiplier": True}}, BAD,
     "task.backoff: multiplier must be a number in [1.0, 10.0]"),
    (_spec, {**BASE, "backoff": {"jitter": None}}, BAD, f"task.backoff: jitter {NOT_NULL}"),
    (_spec, {**BASE, "operation_key": "has space"}, BAD, f"task: operation_key {KEY_RULE}"),
    (_spec, {**BASE, "operation_key": ""}, BAD, f"task: operation_key {KEY_RULE}"),
    (_spec, {**BASE, "operation_key": "k" * 256}, BAD, f"task: operation_key {KEY_RULE}"),
    (_spec, {**BASE, "operation_key": None}, BAD, f"task: operation_key {NOT_NULL}"),
    (_spec, {**BASE, "schedule_to_start_ms": 99}, BAD,
     "task: schedule_to_start_ms must be an integer in [100, 2678400000]"),
    (_spec, {**BASE, "delay_ms": 1, "not_before_at_ms": 1}, BAD,
     "task: give delay_ms or not_before_at_ms, not both"),
    (_spec, {**BASE, "zzz": 1, "aaa": 2}, BAD, "task: has unknown field(s): aaa, zzz"),
    (_spec, {**BASE, "payload": 2**64}, RANGE, "task.payload has an integer outside signed 64-bit"),
    (_spec, {**BASE, "payload": float("inf")}, RANGE, "task.payload has a non-finite number"),
    (_spec, {**BASE, "payload": "x" * 262_144}, LARGE,
     "task.payload is 262146 bytes; at most 262144"),
    (_spec, {**BASE, "cancel_grace_ms": 60_001}, BAD,
     "task: cancel_grace_ms must be an integer in [0, 60000]"),
    (_spec, {**BASE, "priority": 10}, BAD, "task: priority must be an integer in [0, 9]"),
    (_spec, {**BASE, "delay_ms": -1}, BAD, "task: delay_ms must be an integer in [0, 2678400000]"),
    (_spec, {**BASE, "not_before_at_ms": 2**53 + 1}, BAD,
     "task: not_before_at_ms must be an integer in [0, 9007199254740992]"),
    (_spec, {**BASE, "lease_ttl_ms": 600_001}, BAD,
     "task: lease_ttl_ms must be an integer in [100, 600000]"),
    (lambda v: parse_task_spec(v, "tasks[3]"), {**BASE, "backoff": {"jitter": 2}}, BAD,
     "tasks[3].backoff: jitter must be a number in [0.0, 1.0]"),
    (parse_schedule, {"cron": "* * * * *", "task": {**BASE, "operation_key": "k"}}, BAD,
     "schedule: task may not set operation_key (each firing sets its own)"),
    (parse_schedule, {"task": BASE}, BAD, "schedule: cron is required"),
    (parse_schedule, {"cron": 5, "task": BASE}, BAD, "schedule: cron is required: a cron "
     "expression of at most 128 ASCII characters, e.g. '*/5 * * * *'"),
    (parse_schedule, {"cron": "x" * 129, "task": BASE}, BAD, "schedule: cron is required: a "
     "cron expression of at most 128 ASCII characters, e.g. '*/5 * * * *'"),
    (parse_schedule, {"cron": "* * * * *", "task": BASE, "timezone": "Europe/Pa\nris"}, BAD,
     "schedule: timezone must be an IANA time zone name, e.g. 'Europe/Paris'"),
    (parse_schedule, {"cron": "* * * * *", "task": {**BASE, "max_attempts": 0}}, BAD,
     "schedule.task: max_attempts must be an integer in [1, 100]"),
    (parse_schedule, {"cron": "* * * * *", "task": [1]}, BAD,
     "schedule.task: must be a JSON object"),
    (parse_schedule, {"cron": "* * * * *", "task": BASE, "missed_ticks": "all"}, BAD,
     "schedule: missed_ticks must be one of skip, one"),
    (parse_schedule, {"cron": "* * * * *", "task": BASE, "paused": 1}, BAD,
     "schedule: paused must be a boolean"),
    (parse_schedule, {"cron": "* * * * *", "task": BASE, "name": ""}, BAD,
     "schedule: name must be a string of 1-128 characters"),
    (parse_schedule, {"cron": "* * * * *", "task": BASE, "x": 1}, BAD,
     "schedule: has unknown field(s): x"),
    (parse_schedule, [1], BAD, "schedule: must be a JSON object"),
    (lambda v: bodies.QUEUE_REQUEST.parse(v, W), {"name": ""}, BAD,
     "request body: name must be a string of 1-128 characters"),
    (lambda v: bodies.QUEUE_REQUEST.parse(v, W), {"name": None}, BAD,
     f"request body: name {NOT_NULL}"),
    (lambda v: bodies.QUEUE_REQUEST.parse(v, W), {"name": 1}, BAD,
     "request body: name must be a string of 1-128 characters"),
    (lambda v: bodies.QUEUE_REQUEST.parse(v, W), {"x": 1}, BAD,
     "request body: has unknown field(s): x"),
    (lambda v: bodies.QUEUE_REQUEST.parse(v, W), [], BAD, "request body: must be a JSON object"),
    (bodies.parse_credential_request, {"role": "worker"}, BAD,
     "a worker credential needs a queue"),
    (bodies.parse_credential_request, {"role": "producer", "queues": []}, BAD,
     "a producer credential needs a queue"),
    (bodies.parse_credential_request, {"role": "root"}, BAD,
     "request body: role must be one of admin, producer, worker"),
    (bodies.parse_credential_request, {"role": "admin", "queues": ["x"]}, BAD,
     "request body: queues must be a list of at most 1000 32-character hex IDs"),
    (bodies.parse_credential_request, {"role": "admin", "queues": [Q] * 1001}, BAD,
     "request body: queues must be a list of at most 1000 32-character hex IDs"),
    (bodies.parse_credential_request, {"role": "admin", "expires_at_ms": -1}, BAD,
     "request body: expires_at_ms must be an integer in [0, 4611686018427387903]"),
    (bodies.parse_credential_request, {}, BAD, "request body: role is required"),
    (bodies.parse_credential_request, {"role": None}, BAD, f"request body: role {NOT_NULL}"),
    (lambda v: bodies.ROTATE_REQUEST.parse(v, W), {"grace_ms": -1}, BAD,
     "request body: grace_ms must be an integer in [0, 2592000000]"),
    (lambda v: bodies.CANCEL_REQUEST.parse(v, W), {"reason": "x" * 1025}, BAD,
     "request body: reason must be a string of 0-1024 characters"),
    (lambda v: bodies.CANCEL_REQUEST.parse(v, W), {"reason": 5}, BAD,
     "request body: reason must be a string of 0-1024 characters"),
    (bodies.parse_review_request, {"action": "succeed"}, BAD, "succeed needs a non-null result"),
    (bodies.parse_review_request, {"action": "succeed", "result": None}, BAD,
     "succeed needs a non-null result"),
    (bodies.parse_review_request, {"action": "x"}, BAD,
     "request body: action must be one of retry, succeed, fail"),
    (bodies.parse_review_request, {}, BAD, "request body: action is required"),
    (lambda v: bodies.BATCH_SHAPE.parse(v, W), {"tasks": []}, BAD,
     "request body: tasks must be a list of 1-1000 items"),
    (lambda v: bodies.BATCH_SHAPE.parse(v, W), {"tasks": [None]}, BAD,
     "request body: tasks[0] may not be null"),
    (lambda v: bodies.BATCH_SHAPE.parse(v, W), {"tasks": [BASE] * 1001}, BAD,
     "request body: tasks must be a list of 1-1000 items"),
    (lambda v: bodies.BATCH_SHAPE.parse(v, W), {"tasks": "x"}, BAD,
     "request body: tasks must be a list of 1-1000 items"),
    (lambda v: bodies.BATCH_SHAPE.parse(v, W), {}, BAD, "request body: tasks is required"),
    (lambda v: bodies.BATCH_SHAPE.parse(v, W), {"tasks": [BASE], "x": 1}, BAD,
     "request body: has unknown field(s): x"),
]


@pytest.mark.parametrize(("parse", "body", "code", "message"), REFUSED,
                         ids=[f"r{i}" for i in range(len(REFUSED))])
def test_refused_bodies_have_their_code_and_message(parse: Callable[[object], object],
                                                    body: object, code: ErrorCode,
                                                    message: str) -> None:
    with pytest.raises(OrbitError) as info:
        parse(body)
    assert (info.value.code, info.value.message) == (code, message)


def test_a_full_task_spec_parses_to_its_spec() -> None:
    spec = _spec({**BASE, "payload": {"b": [1.50, 2]}, "idempotency": "IDEMPOTENT",
                  "max_attempts": 7.0, "attempt_timeout_ms": 100, "deadline_ms": 200,
                  "lease_ttl_ms": 300, "schedule_to_start_ms": None, "priority": 0,
                  "backoff": {"initial_ms": 10, "max_ms": 5e3, "multiplier": 3, "jitter": 0},
                  "cancel_grace_ms": 0, "delay_ms": 4, "progress_timeout_ms": 100,
                  "requires": {"mem": "64G", "gpu": "a100"},
                  "limits": ["licence:matlab", "customer:42", "licence:matlab"]})
    assert spec == TaskSpec(Capability("h", "1", "1"), '{"b":[1.5,2]}', Policy(
        Idempotency.IDEMPOTENT, 7, Backoff(10, 5000, 3.0, 0.0), 100, 200, 300, None, 0, 100,
        "gpu=a100,mem=64G"),
        None, priority=0, delay_ms=4, given=frozenset(POLICY_FIELDS),
        policy_source=PolicySource.SUBMIT, limit_keys=("licence:matlab", "customer:42"))
    assert isinstance(spec.policy.max_attempts, int) and isinstance(spec.policy.backoff.max_ms,
                                                                      int)
    assert isinstance(spec.policy.backoff.multiplier, float)
    nullable = _spec({**BASE, "schedule_to_start_ms": 166.0}).policy.schedule_to_start_ms
    assert nullable == 166 and isinstance(nullable, int)


def test_a_keyed_spec_keeps_its_key_and_its_digest() -> None:
    """Digests are stored with keyed tasks: a resubmission must digest exactly as before."""
    spec = _spec({**BASE, "operation_key": "order-42", "not_before_at_ms": 5})
    assert (spec.operation_key, spec.not_before_at_ms) == ("order-42", 5)
    assert spec.digest == "1cc54f64ebe0e3238d3c574ebc3ed575254ada0aa62f3cdb75da82b5d2c57ccc"
    odd = _spec({**BASE, "operation_key": "order-42", "payload": {"b": [1.5, 2]},
                 "backoff": {"max_ms": 5e3, "multiplier": 3}, "cancel_grace_ms": 0,
                 "max_attempts": 2.0})
    assert odd.digest == "36f52700b254e12f11d28c5b59a037f7d53454c8a25f61bdd380442057e9d9c8"


def test_a_schedule_parses_to_its_spec_and_keeps_the_task_as_given() -> None:
    task = {**BASE, "max_attempts": 2}
    spec, given = parse_schedule({"cron": " 0  9 * * 1", "timezone": "Europe/Paris",
                                  "name": "daily", "missed_ticks": "one", "paused": True,
                                  "task": task})
    assert spec == ScheduleSpec("0 9 * * 1", "Europe/Paris", _spec(task), "daily",
                                MissedTicks.ONE, True)
    assert given == task


ACCEPTED: list[tuple[Callable[[object], object], object, object]] = [
    (lambda v: bodies.QUEUE_REQUEST.parse(v, W), {}, {}),
    (lambda v: bodies.QUEUE_REQUEST.parse(v, W), {"name": "q"}, {"name": "q"}),
    (bodies.parse_credential_request, {"role": "admin"}, {"role": "admin"}),
    (bodies.parse_credential_request, {"role": "worker", "queues": [Q], "name": "w"},
     {"role": "worker", "queues": [Q], "name": "w"}),
    (bodies.parse_credential_request, {"role": "admin", "expires_at_ms": 5.0},
     {"role": "admin", "expires_at_ms": 5}),
    (lambda v: bodies.ROTATE_REQUEST.parse(v, W), {}, {}),
    (lambda v: bodies.ROTATE_REQUEST.parse(v, W), {"grace_ms": 1000, "expires_at_ms": 1},
     {"grace_ms": 1000, "expires_at_ms": 1}),
    (lambda v: bodies.CANCEL_REQUEST.parse(v, W), {"reason": ""}, {"reason": ""}),
    (bodies.parse_review_request, {"action": "retry", "reason": "r"},
     {"action": "retry", "reason": "r"}),
    (bodies.parse_review_request, {"action": "succeed", "result": {"a": 1.5}},
     {"action": "succeed", "result": {"a": 1.5}}),
    (bodies.parse_review_request, {"action": "fail", "result": None},
     {"action": "fail", "result": None}),
    (lambda v: bodies.BATCH_SHAPE.parse(v, W), {"tasks": [BASE, BASE]},
     {"tasks": [BASE, BASE]}),
]


@pytest.mark.parametrize(("parse", "body", "parsed"), ACCEPTED,
                         ids=[f"a{i}" for i in range(len(ACCEPTED))])
def test_accepted_bodies_give_their_fields_as_sent(parse: Callable[[object], object],
                                                   body: object, parsed: object) -> None:
    assert parse(body) == parsed
