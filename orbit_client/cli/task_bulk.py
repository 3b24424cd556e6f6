"""``orbit tasks cancel`` and ``orbit tasks review``: by ID, or every task of the queue that
matches a filter (counted first, then confirmed); the options and the flow ``orbit tasks
retry`` shares (``by_id_or_filter``, ``act_on_tasks``)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import click

from ..client import OrbitClient
from .app import settings
from .args import F, json_argument, queue_option, stacked
from .output import json_option
from .task_list import filter_options, task_filters
from .tasks import for_each_task


def by_filter(ctx: click.Context, queue_id: str | None, filters: dict[str, Any],
              dry_run: bool, yes: bool, as_json: bool, verb: str,
              act: Callable[..., dict[str, Any]]) -> None:
    """Count the queue's tasks ``filters`` select (``act(client, queue, dry_run=True,
    **filters)``), stop there on ``dry_run`` or none, else ask (or take ``yes``) and act
    on them; ``verb`` ("retried", "cancelled", "reviewed") names what happens."""
    s = settings(ctx)
    queue = s.queue(queue_id)
    client = s.client(ctx)
    out = s.output(as_json)
    counted = act(client, queue, dry_run=True, **filters)
    matched = int(counted["matched"])
    plural = "" if matched == 1 else "s"
    if dry_run or matched == 0:
        if out.human:
            out.line(f"{matched} task{plural} would be {verb}"
                     + ("" if counted["complete"] else " (at least: the count stopped)"))
        else:
            out.json(counted)
        return
    if not yes:
        if not sys.stdin.isatty():
            raise click.UsageError(f"{matched} tasks match: add --yes to go ahead "
                                   "(or --dry-run to count only)")
        click.confirm(f"{matched} task{plural} will be {verb}. Go ahead?", abort=True,
                      err=True)
    done = act(client, queue, **filters)
    if not out.human:
        out.json(done)
        return
    changed = done.get("changed", done.get("retried", 0))
    out.line(f"{verb} {changed} of {done['matched']} matching tasks"
             + (f"; {done['skipped']} moved on meanwhile and were left" if done["skipped"]
                else "")
             + ("" if done["complete"] else "; more match: run the command again"))


def by_id_or_filter(verb: str, *actions: Callable[[Any], Any]) -> Callable[[F], F]:
    """The arguments of a command that acts on tasks by ID or by filter (``orbit tasks
    cancel``, ``retry``, ``review``): [ID...], its own ``actions`` options, --queue, the
    filters (``filter_args``), --reason, --dry-run, --yes (``verb``: what it does without
    asking), --json, and the context first."""
    return stacked(
        click.argument("task_ids", metavar="[ID...]", nargs=-1),
        *actions,
        queue_option,
        filter_options,
        click.option("--reason", default=None, help="Why, for the audit trail."),
        click.option("--dry-run", is_flag=True, help="With a filter: print how many tasks match."),
        click.option("--yes", is_flag=True, help=f"With a filter: {verb} without asking."),
        json_option,
        click.pass_context,
    )


def _split(task_ids: tuple[str, ...], queue_id: str | None,
                        filters: dict[str, Any], dry_run: bool, yes: bool,
                        example: str) -> bool:
    """True for a by-filter call, False for IDs; a usage error for both or neither."""
    filtered = queue_id is not None or any(v is not None for v in filters.values())
    if task_ids:
        if filtered or dry_run or yes:
            raise click.UsageError("give task IDs, or a filter (--state, --handler, ...), "
                                   "not both; --dry-run and --yes go with a filter")
        return False
    if not filtered:
        raise click.UsageError(f"give task IDs, or a filter: e.g. {example}")
    return True


def act_on_tasks(ctx: click.Context, task_ids: tuple[str, ...], queue_id: str | None,
                 filter_args: dict[str, Any], dry_run: bool, yes: bool, as_json: bool,
                 example: str, verb: str, one: Callable[[OrbitClient, str], dict[str, Any]],
                 many: Callable[..., dict[str, Any]]) -> None:
    """A by-ID-or-filter command's work: ``one(client, task_id)`` on each of the IDs
    (``for_each_task``), or ``by_filter`` with ``many``; ``example`` is the filter the usage
    error suggests, ``verb`` as in ``by_filter``."""
    filters = task_filters(**filter_args)
    if _split(task_ids, queue_id, filters, dry_run, yes, example):
        by_filter(ctx, queue_id, filters, dry_run, yes, as_json, verb, many)
    else:
        for_each_task(ctx, task_ids, as_json, one)


@click.command("cancel")
@by_id_or_filter("cancel")
def tasks_cancel(
    ctx: click.Context, task_ids: tuple[str, ...], queue_id: str | None,
    filter_args: dict[str, Any], reason: str | None, dry_run: bool, yes: bool, as_json: bool,
) -> None:
    """Cancel tasks (a running one is killed on its worker); each cancel is audited.

    By ID: orbit tasks cancel ID... By filter: every PENDING, RUNNING or NEEDS_REVIEW task
    of the queue that matches (--state, --handler, --created-after 1h, ... as in orbit
    tasks list); the matching tasks are counted first, --dry-run stops there, and the
    cancel goes ahead after a yes at the prompt or with --yes.
    """
    act_on_tasks(ctx, task_ids, queue_id, filter_args, dry_run, yes, as_json,
                 "--state PENDING --handler X --created-after 1h", "cancelled",
                 lambda client, task_id: client.cancel(task_id, reason),
                 lambda client, queue, **kw: OrbitClient.cancel_tasks(
                     client, queue, reason=reason, **kw))


@click.command("review")
@by_id_or_filter(
    "review",
    click.option("--retry", is_flag=True, help="Run it once more."),
    click.option("--succeed", is_flag=True, help="Mark it succeeded."),
    click.option("--fail", is_flag=True, help="Mark it failed."),
    click.option("--result", default=None, help="With --succeed: result JSON, @FILE or @-."),
)
def tasks_review(
    ctx: click.Context, task_ids: tuple[str, ...], retry: bool, succeed: bool, fail: bool,
    result: str | None, reason: str | None, queue_id: str | None,
    filter_args: dict[str, Any], dry_run: bool, yes: bool, as_json: bool,
) -> None:
    """Resolve tasks in NEEDS_REVIEW, one or several; each decision is audited.

    By ID: with several IDs each is resolved on its own (one that fails is reported on
    stderr and the others still go ahead). By filter: every NEEDS_REVIEW task of the queue
    that matches (--handler, --created-after 1h, ...), counted first; --dry-run stops
    there, and the decision is applied after a yes at the prompt or with --yes.
    """
    chosen = [name for name, on in (("retry", retry), ("succeed", succeed), ("fail", fail)) if on]
    if len(chosen) != 1:
        raise click.UsageError("choose exactly one of --retry, --succeed, --fail")
    action = chosen[0]
    if result is not None and action != "succeed":
        raise click.UsageError("--result goes with --succeed only")
    if result is None and action == "succeed":
        raise click.UsageError("--succeed needs --result JSON: the result the task ends with")
    value = None if result is None else json_argument(result, "result")
    act_on_tasks(ctx, task_ids, queue_id, filter_args, dry_run, yes, as_json,
                 "--state NEEDS_REVIEW --handler X", "reviewed",
                 lambda client, task_id: client.review(task_id, action, value, reason),
                 lambda client, queue, **kw: OrbitClient.review_tasks(
                     client, queue, action, value, reason=reason, **kw))
