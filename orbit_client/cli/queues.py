"""``orbit queues``: create queues and read their statistics."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import click
from rich.console import RenderableType

from ..client import OrbitClient
from .app import settings
from .args import F, queue_option, stacked
from .output import Output, json_option
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


def _on_queue(*own: Callable[[Any], Any]) -> Callable[[F], F]:
    """The arguments of a command about one queue: [QUEUE] or --queue (the credential's one
    queue by default), the command's ``own`` options, --json, and the context first."""
    return stacked(click.argument("queue_arg", metavar="[QUEUE]", required=False),
                   queue_option, *own, json_option, click.pass_context)


@queues.command("stats")
@_on_queue()
def queues_stats(
    ctx: click.Context, queue_arg: str | None, queue_id: str | None, as_json: bool
) -> None:
    """Task counts by state, running attempts and the oldest pending age of a queue."""
    _show_queue(ctx, queue_arg or queue_id, as_json, OrbitClient.queue_stats, stats_view)


@queues.command("capabilities")
@_on_queue()
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
    s.output(as_json).show_or_json(answer, lambda: view(answer, int(time.time() * 1000)))


@queues.command("list")
@json_option
@click.pass_context
def queues_list(ctx: click.Context, as_json: bool) -> None:
    """The queues you may use (an admin: every queue) with their task counts."""
    s = settings(ctx)
    answer = s.client(ctx).list_queues()
    s.output(as_json).show_or_json(
        answer, lambda: queues_table(answer.get("queues") or [], int(time.time() * 1000)))


def _pause_key(handler: str | None, handler_version: str | None) -> str:
    if handler is None:
        return "the queue"
    return f"{handler}" + ("" if handler_version is None else f"@{handler_version}")


# The key a pause holds: the queue, a capability, or one version of it.
_KEY_OPTIONS = (
    click.option("--handler", default=None,
                 help="Only this capability (handler), every version unless "
                      "--handler-version names one."),
    click.option("--handler-version", default=None, help="With --handler: only this version."),
)


def _paused_key(ctx: click.Context, queue_id: str | None, handler: str | None,
                handler_version: str | None, as_json: bool
                ) -> tuple[OrbitClient, str, Output]:
    """The client, the queue (the credential's one queue by default) and the output of a
    pause or resume of the key; a usage error for a version without its handler."""
    if handler_version is not None and handler is None:
        raise click.UsageError("--handler-version goes with --handler")
    s = settings(ctx)
    queue = s.queue(queue_id)
    return s.client(ctx), queue, s.output(as_json)


@queues.command("pause")
@_on_queue(*_KEY_OPTIONS, click.option("--reason", required=True,
                                       help="Why (kept with who paused, in the log)."))
def queues_pause(ctx: click.Context, queue_arg: str | None, queue_id: str | None,
                 handler: str | None, handler_version: str | None, reason: str,
                 as_json: bool) -> None:
    """Pause a queue, or one capability (--handler), or one capability version: no new
    attempts start (running ones finish, the tasks stay PENDING) until resumed."""
    client, queue, out = _paused_key(ctx, queue_arg or queue_id, handler, handler_version,
                                     as_json)
    answer = client.pause(queue, reason, handler, handler_version)
    if out.human:
        out.line(f"paused {_pause_key(handler, handler_version)} in queue {queue}")
    else:
        out.json(answer)


@queues.command("resume")
@_on_queue(*_KEY_OPTIONS, click.option("--reason", default=None, help="Why, for the log."))
def queues_resume(ctx: click.Context, queue_arg: str | None, queue_id: str | None,
                  handler: str | None, handler_version: str | None, reason: str | None,
                  as_json: bool) -> None:
    """Lift the pause of exactly this key (the queue's, a capability's or a version's):
    its tasks start again at once."""
    client, queue, out = _paused_key(ctx, queue_arg or queue_id, handler, handler_version,
                                     as_json)
    answer = client.resume(queue, handler, handler_version, reason)
    if out.human:
        what = _pause_key(handler, handler_version)
        out.line(f"resumed {what} in queue {queue}" if answer.get("resumed")
                 else f"{what} was not paused in queue {queue}")
    else:
        out.json(answer)


@queues.command("pauses")
@_on_queue()
def queues_pauses(ctx: click.Context, queue_arg: str | None, queue_id: str | None,
                  as_json: bool) -> None:
    """The queue's pauses in force, and its last pauses and resumes (who and why)."""
    s = settings(ctx)
    answer = s.client(ctx).pauses(s.queue(queue_arg or queue_id))
    out = s.output(as_json)
    if not out.human:
        out.json(answer)
        return
    if not answer["paused"]:
        out.line("nothing paused")
    for p in answer["paused"]:
        out.line(f"paused: {_pause_key(p['handler'], p['handler_version'])} by "
                 f"{p['paused_by']}: {p['reason']}")
    for entry in answer["log"]:
        out.line(f"{entry['action']} {_pause_key(entry['handler'], entry['handler_version'])}"
                 f" by {entry['actor']}" + (f": {entry['reason']}" if entry["reason"] else ""))


@queues.command("fair")
@_on_queue(
    click.option("--key", "key", default=None, metavar="NAME",
                 help="Take turns between the values of this key name (customer: the tasks' "
                      "customer:<value> keys)."),
    click.option("--off", is_flag=True, help="Plain priority dispatch again."),
)
def queues_fair(ctx: click.Context, queue_arg: str | None, queue_id: str | None,
                key: str | None, off: bool, as_json: bool) -> None:
    """Fair dispatch between keys: with --key the queue's dispatch takes one task of each
    key value in turn (priority still orders one value's tasks); --off ends it; alone it
    shows the setting and its recent changes."""
    if key is not None and off:
        raise click.UsageError("give --key or --off, not both")
    s = settings(ctx)
    queue = s.queue(queue_arg or queue_id)
    client = s.client(ctx)
    if key is not None:
        answer = client.set_fair(queue, key)
    elif off:
        answer = client.fair_off(queue)
    else:
        answer = client.fair(queue)
    out = s.output(as_json)
    if not out.human:
        out.json(answer)
        return
    out.line(f"queue {queue}: fair by {answer['key']}" if answer["key"]
             else f"queue {queue}: not fair (plain priority dispatch)")
    for change in answer.get("changes", []):
        out.line(f"{change['action']} {change['key']} by {change['actor']}")
