"""``orbit limits set | list | get | delete``: a queue's flow-control limits by key
(docs/flow-control.md, docs/cli.md "Limits"). ``list`` and ``get`` print human views
(``--json``, or a pipe, for the server's JSON); ``set`` and ``delete`` print JSON."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import click
from rich.console import Group, RenderableType
from rich.text import Text

from orbit_wire.errors import OrbitError
from orbit_wire.flow import parse_rate

from .app import settings
from .args import queue_option
from .output import json_option
from .render import _table as table_of


@click.group()
def limits() -> None:
    """Flow-control limits by key: at most N running, at most N starts per interval."""


def _rate_text(limit: Mapping[str, Any]) -> str:
    rate = limit.get("rate")
    if not isinstance(rate, Mapping):
        return "-"
    return f"{rate.get('count')}/{rate.get('interval_ms')}ms"


def limits_table(found: list[dict[str, Any]]) -> RenderableType:
    if not found:
        return Text("No limits.")
    table = table_of("pattern", "max running", "rate", "updated by")
    for limit in found:
        running = limit.get("max_running")
        table.add_row(str(limit.get("pattern")), "-" if running is None else str(running),
                      _rate_text(limit), str(limit.get("updated_by")))
    return table


def limit_view(limit: dict[str, Any]) -> RenderableType:
    parts: list[RenderableType] = [limits_table([limit])]
    usage = limit.get("usage")
    if isinstance(usage, Mapping):
        parts.append(Text(f"now: {usage.get('running')} running, "
                          f"{usage.get('recent_starts')} starts in the rate window"))
    for change in limit.get("changes") or []:
        parts.append(Text(f"{change.get('action')} by {change.get('actor')} at "
                          f"{change.get('at_ms')}: {change.get('detail')}"))
    return Group(*parts)


@limits.command("set")
@click.argument("pattern")
@queue_option
@click.option("--max-running", type=click.IntRange(1, 1_000_000), default=None,
              help="Open (reserved or running) attempts per key at most.")
@click.option("--rate", default=None,
              help="Starts per key at most N per interval: 10/1s, 100/m, 5/500ms.")
@click.pass_context
def limits_set(ctx: click.Context, pattern: str, queue_id: str | None,
               max_running: int | None, rate: str | None) -> None:
    """Set the limit of PATTERN (a key such as licence:matlab, or customer:* for each
    customer key its own limit) in the queue (admin); print it as JSON."""
    try:
        parsed = None if rate is None else parse_rate(rate)
    except OrbitError as exc:
        raise click.BadParameter(exc.message, param_hint="--rate") from None
    if max_running is None and parsed is None:
        raise click.UsageError("give --max-running, --rate or both")
    s = settings(ctx)
    made = s.client(ctx).set_limit(s.queue(queue_id), pattern, max_running=max_running,
                                   rate=parsed)
    s.output(True).json(made)


@limits.command("list")
@queue_option
@json_option
@click.pass_context
def limits_list(ctx: click.Context, queue_id: str | None, as_json: bool) -> None:
    """The queue's limits."""
    s = settings(ctx)
    found = s.client(ctx).list_limits(s.queue(queue_id))
    s.output(as_json).show_or_json({"limits": found}, lambda: limits_table(found))


@limits.command("get")
@click.argument("pattern")
@queue_option
@json_option
@click.pass_context
def limits_get(ctx: click.Context, pattern: str, queue_id: str | None, as_json: bool) -> None:
    """One limit, its key's usage now (for a key) and its recent changes."""
    s = settings(ctx)
    found = s.client(ctx).get_limit(s.queue(queue_id), pattern)
    s.output(as_json).show_or_json(found, lambda: limit_view(found))


@limits.command("delete")
@click.argument("pattern")
@queue_option
@click.pass_context
def limits_delete(ctx: click.Context, pattern: str, queue_id: str | None) -> None:
    """Delete the limit of PATTERN (admin): the tasks it held may start."""
    s = settings(ctx)
    s.output(True).json(s.client(ctx).delete_limit(s.queue(queue_id), pattern))
