"""``orbit tasks retry``: run FAILED or CANCELLED tasks again, by ID or by filter (with a
count first, and a confirmation)."""

from __future__ import annotations

import click

from ..client import OrbitClient
from .args import queue_option
from .output import json_option
from .task_bulk import by_filter
from .task_list import filter_options, task_filters
from .tasks import for_each_task


@click.command("retry")
@click.argument("task_ids", metavar="[ID...]", nargs=-1)
@queue_option
@filter_options
@click.option("--reason", default=None, help="Why, for the audit trail.")
@click.option("--dry-run", is_flag=True, help="With a filter: print how many tasks match.")
@click.option("--yes", is_flag=True, help="With a filter: retry without asking.")
@json_option
@click.pass_context
def tasks_retry(
    ctx: click.Context, task_ids: tuple[str, ...], queue_id: str | None,
    states: tuple[str, ...], handler: str | None, handler_version: str | None,
    payload_version: str | None, created_after: str | None, created_before: str | None,
    finished_after: str | None, finished_before: str | None, reason: str | None,
    dry_run: bool, yes: bool, as_json: bool,
) -> None:
    """Run FAILED or CANCELLED tasks again, each with a fresh set of its policy's attempts;
    their earlier attempts stay in the history and each retry is audited.

    By ID: orbit tasks retry ID... (several IDs: each on its own). By filter: every
    FAILED or CANCELLED task of the queue that matches (--state FAILED or CANCELLED,
    --handler, --created-after 1h, ... as in orbit tasks list); the matching tasks are
    counted first, --dry-run stops there, and the retry goes ahead after a yes at the
    prompt or with --yes.
    """
    filters = task_filters(states, handler, handler_version, payload_version, created_after,
                           created_before, finished_after, finished_before)
    filtered = queue_id is not None or any(v is not None for v in filters.values())
    if task_ids:
        if filtered or dry_run or yes:
            raise click.UsageError("give task IDs, or a filter (--state, --handler, ...), "
                                   "not both; --dry-run and --yes go with a filter")
        for_each_task(ctx, task_ids, as_json,
                      lambda client, task_id: client.retry(task_id, reason))
        return
    if not filtered:
        raise click.UsageError("give task IDs, or a filter: e.g. --state FAILED --handler X "
                               "--created-after 1h (orbit tasks retry --help)")
    by_filter(ctx, queue_id, filters, dry_run, yes, as_json, "retried",
              lambda client, queue, **kw: OrbitClient.retry_tasks(
                  client, queue, reason=reason, **kw))
