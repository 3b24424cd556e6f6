"""``orbit schedules create | list | get | pause | resume | delete``: periodic schedules
(docs/cli.md "Schedules"). ``list`` and ``get`` print human views (``--json``, or a pipe,
for the server's JSON); the others print JSON."""

from __future__ import annotations

import time
from typing import Any

import click

from ..client import OrbitClient
from .app import settings
from .args import (
    capability_of,
    handler_options,
    idempotency_of,
    idempotent_option,
    json_argument,
    queue_option,
)
from .output import json_option
from .render_schedules import schedule_view, schedules_table


def _client(ctx: click.Context) -> OrbitClient:
    return settings(ctx).client(ctx)


def _print_json(ctx: click.Context, value: Any) -> None:
    settings(ctx).output(True).json(value)


@click.group()
def schedules() -> None:
    """Periodic schedules: a cron expression in a time zone and the task each tick submits."""


@schedules.command("create")
@queue_option
@click.option("--cron", required=True,
              help="Cron expression, e.g. '*/5 * * * *' (quote it): minute hour day-of-month "
                   "month day-of-week.")
@click.option("--with-seconds", is_flag=True,
              help="The cron has 6 fields, seconds FIRST (as in Quartz): '*/10 * * * * *' "
                   "fires every 10 seconds.")
@click.option("--timezone", default="UTC", show_default=True, help="IANA time zone.")
@click.option("--name", default=None, help="A label for people.")
@click.option("--missed-ticks", type=click.Choice(["skip", "one"]), default="skip",
              show_default=True, help="Ticks missed while no server ran: skip, or one catch-up.")
@click.option("--paused", is_flag=True, help="Create it paused.")
@handler_options
@click.option("--payload", required=True, help="Payload JSON, or @FILE, or @- for stdin.")
@idempotent_option
@click.option("--priority", type=click.IntRange(0, 9), default=None, help="0-9 (default 5).")
@click.option("--max-attempts", type=click.IntRange(1, 100), default=None)
@click.option("--deadline-ms", type=int, default=None)
@click.option("--json", "as_json", is_flag=True, help="Print the schedule as JSON, not its ID.")
@click.pass_context
def schedules_create(ctx: click.Context, queue_id: str | None, cron: str, with_seconds: bool,
                     timezone: str, name: str | None, missed_ticks: str, paused: bool,
                     handler: str, handler_version: str | None, payload_version: str | None,
                     payload: str, idempotent: bool | None, priority: int | None,
                     max_attempts: int | None,
                     deadline_ms: int | None, as_json: bool) -> None:
    """Create a schedule and print its ID; its first tick is the first after now. Each
    tick's task gets the policy its capability's worker declared for what is left out."""
    client = _client(ctx)
    queue = settings(ctx).queue(queue_id)
    task: dict[str, Any] = {
        **capability_of(client, queue, handler, handler_version, payload_version),
        "payload": json_argument(payload, "payload"),
    }
    optional = {"idempotency": idempotency_of(idempotent), "priority": priority,
                "max_attempts": max_attempts, "deadline_ms": deadline_ms}
    task.update({k: v for k, v in optional.items() if v is not None})
    body: dict[str, Any] = {"cron": cron, "timezone": timezone, "task": task,
                            "missed_ticks": missed_ticks, "paused": paused}
    if with_seconds:
        body["with_seconds"] = True
    if name is not None:
        body["name"] = name
    made = client.create_schedule(queue, body)
    if as_json:
        _print_json(ctx, made)
    else:
        settings(ctx).output(False).line(made["id"])


@schedules.command("list")
@queue_option
@json_option
@click.pass_context
def schedules_list(ctx: click.Context, queue_id: str | None, as_json: bool) -> None:
    """The queue's schedules: cron, state, next fire time (in each one's zone); `--json`
    prints them as JSON, as on every list command."""
    queue = settings(ctx).queue(queue_id)
    found = _client(ctx).list_schedules(queue)
    settings(ctx).output(as_json).show_or_json(
        {"schedules": found}, lambda: schedules_table(found, int(time.time() * 1000)))


@schedules.command("get")
@click.argument("schedule_id")
@json_option
@click.pass_context
def schedules_get(ctx: click.Context, schedule_id: str, as_json: bool) -> None:
    """A schedule, its next five fire times in its time zone, and its recent firings."""
    found = _client(ctx).get_schedule(schedule_id)
    settings(ctx).output(as_json).show_or_json(
        found, lambda: schedule_view(found, int(time.time() * 1000)))


@schedules.command("pause")
@click.argument("schedule_id")
@click.pass_context
def schedules_pause(ctx: click.Context, schedule_id: str) -> None:
    """Stop firing; ticks while paused never fire."""
    _print_json(ctx, _client(ctx).pause_schedule(schedule_id))


@schedules.command("resume")
@click.argument("schedule_id")
@click.pass_context
def schedules_resume(ctx: click.Context, schedule_id: str) -> None:
    """Fire again from the first tick after now."""
    _print_json(ctx, _client(ctx).resume_schedule(schedule_id))


@schedules.command("delete")
@click.argument("schedule_id")
@click.pass_context
def schedules_delete(ctx: click.Context, schedule_id: str) -> None:
    """Delete the schedule; the tasks it submitted stay."""
    _print_json(ctx, _client(ctx).delete_schedule(schedule_id))
