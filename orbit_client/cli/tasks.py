"""``orbit tasks``: submit, read, cancel and review tasks (producer); ``retry`` is
task_retry.py, ``list`` task_list.py."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import click

from orbit_wire.errors import OrbitError
from orbit_wire.labels import parse_labels

from ..client import OrbitClient
from ..durations import parse_duration_ms, parse_instant_ms
from .app import error_line, settings
from .args import (
    capability_of,
    handler_options,
    idempotency_of,
    idempotent_option,
    json_argument,
    queue_option,
    wait_option,
)
from .exits import EXIT_WAIT_ENDED, exit_code_for, exit_code_for_state
from .output import Output, json_option, task_for_json
from .render import attempts_view, audit_view, task_summary
from .waiting import wait_for_task


def _now_ms() -> int:
    return int(time.time() * 1000)


def show_task(out: Output, client: OrbitClient, task: dict[str, Any]) -> None:
    """The task in the chosen form; the human summary also tells the last attempt's story."""
    if not out.human:
        out.json(task_for_json(task))
        return
    last = None
    if task.get("attempts"):
        history = client.attempts(str(task["id"]))
        attempts = history.get("attempts") or []
        last = attempts[-1] if attempts else None
    out.show(task_summary(task, last, _now_ms()))


@click.group()
def tasks() -> None:
    """Submit, find, read, cancel, review and retry tasks (producer)."""


@tasks.command("submit")
@queue_option
@handler_options
@click.option("--payload", required=True, help="Payload JSON, or @FILE, or @- for stdin.")
@idempotent_option
@click.option("--max-attempts", type=click.IntRange(1, 100), default=None)
@click.option("--operation-key", default=None, help="Submitting the same key returns one task.")
@click.option("--lease-ttl-ms", type=int, default=None)
@click.option("--attempt-timeout-ms", type=int, default=None)
@click.option("--deadline-ms", type=int, default=None,
              help="Total deadline, from when the task may first run.")
@click.option("--delay", default=None, help="Run no earlier than this from now: 500ms, 30s, 5m.")
@click.option("--not-before", default=None,
              help="Run no earlier than this instant: ISO 8601 with offset, or epoch ms.")
@click.option("--priority", type=click.IntRange(0, 9), default=None,
              help="0-9, higher dispatched first (default 5).")
@click.option("--schedule-to-start", default=None,
              help="Fail the task (NOT_STARTED_IN_TIME) if no attempt starts within this "
                   "long of submit: 30s, 5m, 1h.")
@click.option("--cancel-grace", default=None,
              help="How long a cancel lets a running handler stop by itself before the "
                   "kill: 0 to 60s (default 2s; 0 kills at once).")
@click.option("--progress-timeout", default=None,
              help="Kill an attempt that reports no progress for this long "
                   "(PROGRESS_TIMEOUT): 100ms to 1d (default: no bound).")
@click.option("--requires", "requires", multiple=True, metavar="NAME=VALUE",
              help="A label its worker must have (repeatable; orbit-supervise --label).")
@click.option("--limit", "limit_keys", multiple=True, metavar="KEY",
              help="A flow-control key, name:value (repeat, at most 8): the queue's limits "
                   "that match it hold the task while they are full.")
@json_option
@wait_option
@click.pass_context
def tasks_submit(
    ctx: click.Context,
    queue_id: str | None,
    handler: str,
    handler_version: str | None,
    payload_version: str | None,
    payload: str,
    idempotent: bool | None,
    max_attempts: int | None,
    operation_key: str | None,
    lease_ttl_ms: int | None,
    attempt_timeout_ms: int | None,
    deadline_ms: int | None,
    delay: str | None,
    not_before: str | None,
    priority: int | None,
    schedule_to_start: str | None,
    cancel_grace: str | None,
    progress_timeout: str | None,
    requires: tuple[str, ...],
    limit_keys: tuple[str, ...],
    as_json: bool,
    wait_s: float | None,
) -> None:
    """Submit one task and print its ID (with --wait: the task once settled).

    A policy option left out takes the policy the capability's worker declared (its
    TaskType), else the server default; without --handler-version and --payload-version the
    versions are those the queue has registered for the handler, when there is one pair."""
    spec: dict[str, Any] = {"handler": handler, "payload": json_argument(payload, "payload")}
    optional = {
        "idempotency": idempotency_of(idempotent),
        "max_attempts": max_attempts,
        "operation_key": operation_key,
        "lease_ttl_ms": lease_ttl_ms,
        "attempt_timeout_ms": attempt_timeout_ms,
        "deadline_ms": deadline_ms,
        "delay_ms": None if delay is None else parse_duration_ms(delay, "--delay"),
        "not_before_at_ms": (None if not_before is None
                             else parse_instant_ms(not_before, "--not-before")),
        "priority": priority,
        "schedule_to_start_ms": None if schedule_to_start is None
        else parse_duration_ms(schedule_to_start, "--schedule-to-start"),
        "cancel_grace_ms": None if cancel_grace is None
        else parse_duration_ms(cancel_grace, "--cancel-grace"),
        "progress_timeout_ms": None if progress_timeout is None
        else parse_duration_ms(progress_timeout, "--progress-timeout"),
        "requires": _requires(requires),
    }
    spec.update({k: v for k, v in optional.items() if v is not None})
    if limit_keys:
        spec["limits"] = list(limit_keys)
    s = settings(ctx)
    queue = s.queue(queue_id)
    client = s.client(ctx)
    spec.update(capability_of(client, queue, handler, handler_version, payload_version))
    task = client.submit(queue, spec)
    if wait_s is not None:
        _show_waited(ctx, s.output(as_json), client, task["id"], wait_s)
    elif as_json:
        s.output(True).json(task_for_json(task))
    else:
        s.output(False).line(task["id"])


def _show_waited(
    ctx: click.Context, out: Output, client: OrbitClient, task_id: str, wait_s: float
) -> None:
    task = wait_for_task(client, task_id, wait_s)
    show_task(out, client, task)
    code = exit_code_for_state(str(task.get("state")))
    if out.human and code == EXIT_WAIT_ENDED:
        out.line(f"Still {task.get('state')} after {wait_s:g} s; wait again with "
                 f"`orbit tasks get {task_id} --wait SECONDS`.")
    ctx.exit(code)


@tasks.command("get")
@click.argument("task_id")
@wait_option
@json_option
@click.pass_context
def tasks_get(ctx: click.Context, task_id: str, wait_s: float | None, as_json: bool) -> None:
    """Show a task (with --wait: once settled or when the wait ends)."""
    s = settings(ctx)
    client = s.client(ctx)
    if wait_s is not None:
        _show_waited(ctx, s.output(as_json), client, task_id, wait_s)
    else:
        show_task(s.output(as_json), client, client.get_task(task_id))


@tasks.command("attempts")
@click.argument("task_id")
@json_option
@click.pass_context
def tasks_attempts(ctx: click.Context, task_id: str, as_json: bool) -> None:
    """The attempt history of a task, and late reports kept as evidence."""
    s = settings(ctx)
    history = s.client(ctx).attempts(task_id)
    s.output(as_json).show_or_json(history, lambda: attempts_view(history, _now_ms()))


@tasks.command("audit")
@click.argument("task_id")
@json_option
@click.pass_context
def tasks_audit(ctx: click.Context, task_id: str, as_json: bool) -> None:
    """Every state change of a task and its attempts, with time and actor."""
    s = settings(ctx)
    answer = s.client(ctx).audit(task_id)
    s.output(as_json).show_or_json(
        answer, lambda: audit_view(answer.get("events") or [], _now_ms()))


def for_each_task(ctx: click.Context, task_ids: Sequence[str], as_json: bool,
                  act: Callable[[OrbitClient, str], dict[str, Any]]) -> None:
    """``act`` on each task, each on its own: one ID shows the task; with several, one that
    fails is reported on stderr and the others still go ahead (the exit code is the first
    failure's)."""
    s = settings(ctx)
    client = s.client(ctx)
    out = s.output(as_json)
    if len(task_ids) == 1:
        show_task(out, client, act(client, task_ids[0]))
        return
    done: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    exit_code = 0
    for task_id in task_ids:
        try:
            task = act(client, task_id)
        except OrbitError as exc:
            click.echo(error_line(exc, s.server_url(), f"task {task_id}: "), err=True)
            errors.append({"task_id": task_id, "code": exc.code.value, "message": exc.message})
            exit_code = exit_code or exit_code_for(exc)
            continue
        done.append(task)
        if out.human:
            out.line(f"{task['id']}  {task['state']}")
    if not out.human:
        out.json({"tasks": [task_for_json(t) for t in done], "errors": errors})
    ctx.exit(exit_code)


def _requires(texts: tuple[str, ...]) -> dict[str, str] | None:
    """``--requires NAME=VALUE`` options as the TaskSpec's ``requires`` (None: none given)."""
    if not texts:
        return None
    try:
        return parse_labels(texts)
    except OrbitError as exc:
        raise OrbitError(exc.code, f"--requires: {exc.message}") from None
