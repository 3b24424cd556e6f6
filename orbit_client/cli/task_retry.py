"""``orbit tasks retry``: run FAILED or CANCELLED tasks again, by ID or by filter (with a
count first, and a confirmation)."""

from __future__ import annotations

from typing import Any

import click

from ..client import OrbitClient
from .task_bulk import act_on_tasks, by_id_or_filter


@click.command("retry")
@by_id_or_filter("retry")
def tasks_retry(
    ctx: click.Context, task_ids: tuple[str, ...], queue_id: str | None,
    filter_args: dict[str, Any], reason: str | None, dry_run: bool, yes: bool, as_json: bool,
) -> None:
    """Run FAILED or CANCELLED tasks again, each with a fresh set of its policy's attempts;
    their earlier attempts stay in the history and each retry is audited.

    By ID: orbit tasks retry ID... (several IDs: each on its own). By filter: every
    FAILED or CANCELLED task of the queue that matches (--state FAILED or CANCELLED,
    --handler, --created-after 1h, ... as in orbit tasks list); the matching tasks are
    counted first, --dry-run stops there, and the retry goes ahead after a yes at the
    prompt or with --yes.
    """
    act_on_tasks(ctx, task_ids, queue_id, filter_args, dry_run, yes, as_json,
                 "--state FAILED --handler X --created-after 1h (orbit tasks retry --help)",
                 "retried", lambda client, task_id: client.retry(task_id, reason),
                 lambda client, queue, **kw: OrbitClient.retry_tasks(
                     client, queue, reason=reason, **kw))
