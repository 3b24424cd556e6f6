"""``orbit tasks list``: find tasks of a queue by state, capability and time, page by page."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

import click

from .app import settings
from .args import parse_instant, queue_option, stacked
from .output import json_option, task_for_json
from .render import tasks_table

STATES = ("PENDING", "RUNNING", "NEEDS_REVIEW", "SUCCEEDED", "FAILED", "CANCELLED")
MAX_PAGE = 500  # the server's bound on one page
_MAX_PAGES = 10_000  # --all stops here whatever the filters do


def _states(values: tuple[str, ...]) -> list[str] | None:
    names = [part.strip().upper() for v in values for part in v.split(",") if part.strip()]
    bad = [n for n in names if n not in STATES]
    if bad:
        raise click.BadParameter(f"{bad[0]!r} is not one of {', '.join(STATES)}",
                                 param_hint="--state")
    return list(dict.fromkeys(names)) or None


_FILTERS = stacked(
    click.option("--state", "states", multiple=True, metavar="STATE[,STATE]",
                 help="Only tasks in these states (repeatable or comma-separated)."),
    click.option("--handler", default=None, help="Only this handler."),
    click.option("--handler-version", default=None, help="Only this handler version."),
    click.option("--payload-version", default=None, help="Only this payload version."),
    click.option("--created-after", metavar="TIME", help="Submitted at or after TIME."),
    click.option("--created-before", metavar="TIME", help="Submitted at or before TIME."),
    click.option("--finished-after", metavar="TIME", help="Finished at or after TIME."),
    click.option("--finished-before", metavar="TIME", help="Finished at or before TIME."),
)
_FILTER_NAMES = ("states", "handler", "handler_version", "payload_version", "created_after",
                 "created_before", "finished_after", "finished_before")


def filter_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The task filters' options (``orbit tasks list``, ``cancel``, ``retry``, ``review``),
    given to the command as one ``filter_args`` dict: ``task_filters(**filter_args)``."""
    @functools.wraps(fn)
    def gathered(*args: Any, **kwargs: Any) -> Any:
        filter_args = {name: kwargs.pop(name) for name in _FILTER_NAMES}
        return fn(*args, filter_args=filter_args, **kwargs)
    return _FILTERS(gathered)


def task_filters(states: tuple[str, ...], handler: str | None, handler_version: str | None,
                 payload_version: str | None, created_after: str | None,
                 created_before: str | None, finished_after: str | None,
                 finished_before: str | None) -> dict[str, Any]:
    """The filter options as the client's keyword arguments (TIME read against now)."""
    now_ms = int(time.time() * 1000)
    times = {
        name: None if value is None else parse_instant(value, now_ms, "--" + name.replace("_", "-"))
        for name, value in (("created_after", created_after), ("created_before", created_before),
                            ("finished_after", finished_after),
                            ("finished_before", finished_before))
    }
    return {"state": _states(states), "handler": handler, "handler_version": handler_version,
            "payload_version": payload_version, **times}


@click.command("list")
@queue_option
@filter_options
@click.option("--newest/--oldest", "newest", default=True,
              help="Newest first (default) or oldest first, by submit time.")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True,
              help="How many tasks to show.")
@click.option("--all", "all_", is_flag=True, help="Every matching task (follows every page).")
@click.option("--cursor", default=None, help="Go on from an earlier list's next cursor.")
@json_option
@click.pass_context
def tasks_list(
    ctx: click.Context, queue_id: str | None, filter_args: dict[str, Any], newest: bool,
    limit: int, all_: bool, cursor: str | None, as_json: bool,
) -> None:
    """List a queue's tasks, newest first: find any task by state, handler or time (the
    review queue is --state NEEDS_REVIEW).

    TIME is 15m, 2h, 3d or 1w (that long ago), an ISO date or date-time (UTC unless it
    names an offset), or epoch milliseconds. A page that ends early prints the cursor to
    go on with.
    """
    filters = task_filters(**filter_args)
    filters["order"] = "newest" if newest else "oldest"
    s = settings(ctx)
    queue = s.queue(queue_id)
    client = s.client(ctx)
    found: list[dict[str, Any]] = []
    for _ in range(_MAX_PAGES):
        want = MAX_PAGE if all_ else min(MAX_PAGE, limit - len(found))
        page = client.list_tasks(queue, **filters, limit=want, cursor=cursor)
        found.extend(page.get("tasks") or [])
        cursor = page.get("next_cursor")
        # A filtered page may hold fewer tasks than asked (even none) and still go on.
        if not cursor or (not all_ and len(found) >= limit):
            break
    out = s.output(as_json)
    if not out.human:
        out.json({"tasks": [task_for_json(t) for t in found], "next_cursor": cursor})
        return
    out.show(tasks_table(found, int(time.time() * 1000)))
    if cursor:
        out.line(f"More tasks may match: add --cursor {cursor} (or --all) to go on.")
