"""``orbit queues``: create queues and read their statistics."""

from __future__ import annotations

import time

import click

from .app import settings
from .args import queue_option
from .output import json_option
from .render import queues_table, registered_view, stats_view


@click.group()
def queues() -> None:
    """Create queues (admin), list them and read their statistics."""


@queues.command("create")
@click.option("--name", default=None, help="A name for people; the ID is what counts.")
@json_option
@click.pass_context
def queues_create(ctx: click.Context, name: str | None, as_json: bool) -> None:
    """Create a queue and print its ID (with --json: the whole queue)."""
    queue = settings(ctx).client(ctx).create_queue(name)
    out = settings(ctx).output(False)
    if as_json:
        out.json(queue)
    else:
        out.line(queue["id"])


@queues.command("stats")
@click.argument("queue_arg", metavar="[QUEUE]", required=False)
@queue_option
@json_option
@click.pass_context
def queues_stats(
    ctx: click.Context, queue_arg: str | None, queue_id: str | None, as_json: bool
) -> None:
    """Task counts by state, running attempts and the oldest pending age of a queue."""
    s = settings(ctx)
    stats = s.client(ctx).queue_stats(s.queue(queue_arg or queue_id))
    out = s.output(as_json)
    if out.human:
        out.show(stats_view(stats, int(time.time() * 1000)))
    else:
        out.json(stats)


@queues.command("capabilities")
@click.argument("queue_arg", metavar="[QUEUE]", required=False)
@queue_option
@json_option
@click.pass_context
def queues_capabilities(
    ctx: click.Context, queue_arg: str | None, queue_id: str | None, as_json: bool
) -> None:
    """The queue's registered capabilities and the policy each one's TaskType declares."""
    s = settings(ctx)
    answer = s.client(ctx).capabilities(s.queue(queue_arg or queue_id))
    out = s.output(as_json)
    if out.human:
        out.show(registered_view(answer, int(time.time() * 1000)))
    else:
        out.json(answer)


@queues.command("list")
@json_option
@click.pass_context
def queues_list(ctx: click.Context, as_json: bool) -> None:
    """The queues you may use (an admin: every queue) with their task counts."""
    s = settings(ctx)
    answer = s.client(ctx).list_queues()
    out = s.output(as_json)
    if out.human:
        out.show(queues_table(answer.get("queues") or [], int(time.time() * 1000)))
    else:
        out.json(answer)
