"""``orbit workers``: the live worker instances, on every replica."""

from __future__ import annotations

import time

import click

from .app import settings
from .output import json_option
from .render import workers_view


@click.group()
def workers() -> None:
    """See the live workers (admin, producer)."""


@workers.command("list")
@click.option("--queue", "queue_id", default=None, help="Only the workers of this queue.")
@json_option
@click.pass_context
def workers_list(ctx: click.Context, queue_id: str | None, as_json: bool) -> None:
    """Live workers: queue, replica, version, capabilities, slots, credit, heartbeat, and
    every attempt they are running (task, attempt, child pid, for how long)."""
    s = settings(ctx)
    answer = s.client(ctx).list_workers(queue_id)
    s.output(as_json).show_or_json(
        answer, lambda: workers_view(answer.get("workers") or [], int(time.time() * 1000)))
