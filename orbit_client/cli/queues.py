"""``orbit queues``: create queues and read their statistics."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import click
from rich.console import RenderableType

from ..client import OrbitClient
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
    _show_queue(ctx, queue_arg or queue_id, as_json, OrbitClient.queue_stats, stats_view)


@queues.command("capabilities")
@click.argument("queue_arg", metavar="[QUEUE]", required=False)
@queue_option
@json_option
@click.pass_context
def queues_capabilities(
    ctx: click.Context, queue_arg: str | None, queue_id: str | None, as_json: bool
) -> None:
    """The queue's registered capabilities and the policy each one's TaskType declares."""
    _show_queue(ctx, queue_arg or queue_id, as_json, OrbitClient.capabilities, registered_view)


def _show_queue(ctx: click.Context, queue_id: str | None, as_json: bool,
                read: Callable[[OrbitClient, str], dict[str, Any]],
                view: Callable[[dict[str, Any], int], RenderableType]) -> None:
    """One answer about a queue (the credential's one queue by default), as a view or JSON."""
    s = settings(ctx)
    answer = read(s.client(ctx), s.queue(queue_id))
    out = s.output(as_json)
    if out.human:
        out.show(view(answer, int(time.time() * 1000)))
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
