"""``orbit workflows get | list | cancel | submit``: workflows (docs/workflows.md, docs/cli.md
"Workflows"). ``get`` and ``list`` print human views (``--json``, or a pipe, for the
server's JSON); ``cancel`` and ``submit`` print the workflow's ID, or JSON with ``--json``."""

from __future__ import annotations

import time

import click
import orjson

from orbit_wire.errors import ErrorCode, OrbitError

from .app import settings
from .args import queue_option, read_argument
from .output import json_option
from .render_workflows import WORKFLOW_STYLES, workflow_view, workflows_table


def _now_ms() -> int:
    return int(time.time() * 1000)


@click.group()
def workflows() -> None:
    """Workflows: graphs of tasks run in order (chains, groups, chords)."""


@workflows.command("get")
@click.argument("workflow_id")
@click.option("--wait", "wait_s", type=click.FloatRange(min=0, max=60), default=None,
              metavar="SECONDS", help="Wait up to SECONDS (at most 60) for it to end or be "
                                      "blocked by a review.")
@json_option
@click.pass_context
def workflows_get(ctx: click.Context, workflow_id: str, wait_s: float | None,
                  as_json: bool) -> None:
    """The workflow and its graph: each node, its parents, state, task and cause."""
    s = settings(ctx)
    wait_ms = None if wait_s is None else int(wait_s * 1000)
    answer = s.client(ctx).get_workflow(workflow_id, wait_ms)
    s.output(as_json).show_or_json(answer, lambda: workflow_view(answer, _now_ms()))


@workflows.command("list")
@queue_option
@click.option("--state", type=click.Choice(sorted(WORKFLOW_STYLES), case_sensitive=False),
              default=None, help="Only workflows in this state.")
@click.option("--limit", type=click.IntRange(1, 500), default=None, help="At most N (1-500).")
@click.option("--cursor", default=None, help="The next_cursor of the page before.")
@json_option
@click.pass_context
def workflows_list(ctx: click.Context, queue_id: str | None, state: str | None,
                   limit: int | None, cursor: str | None, as_json: bool) -> None:
    """The queue's workflows, newest first, with their node counts by state."""
    s = settings(ctx)
    answer = s.client(ctx).list_workflows(s.queue(queue_id), state=state, limit=limit,
                                          cursor=cursor)
    out = s.output(as_json)
    if out.human:
        out.show(workflows_table(answer.get("workflows") or [], _now_ms()))
        if answer.get("next_cursor"):
            out.line(f"more: --cursor {answer['next_cursor']}")
    else:
        out.json(answer)


@workflows.command("cancel")
@click.argument("workflow_id")
@click.option("--reason", default=None, help="Why (kept in each node's audit).")
@json_option
@click.pass_context
def workflows_cancel(ctx: click.Context, workflow_id: str, reason: str | None,
                     as_json: bool) -> None:
    """Cancel every node not yet ended (running ones cooperatively, then killed)."""
    s = settings(ctx)
    answer = s.client(ctx).cancel_workflow(workflow_id, reason)
    s.output(as_json).show_or_json(answer, lambda: workflow_view(answer, _now_ms()))


@workflows.command("submit")
@queue_option
@click.argument("body")
@click.option("--json", "as_json", is_flag=True, help="Print the workflow as JSON, not its ID.")
@click.pass_context
def workflows_submit(ctx: click.Context, queue_id: str | None, body: str,
                     as_json: bool) -> None:
    """Submit BODY (the JSON of POST /v1/queues/{id}/workflows: inline, @FILE or @-) as one
    workflow, all or nothing; prints its ID."""
    s = settings(ctx)
    try:
        value = orjson.loads(read_argument(body, "workflow"))
    except orjson.JSONDecodeError as exc:
        raise OrbitError(ErrorCode.INVALID_JSON, f"the workflow body: {exc}") from None
    if not isinstance(value, dict):
        raise OrbitError(ErrorCode.BAD_REQUEST, "the workflow body must be a JSON object")
    handle = s.client(ctx).submit_workflow(value, queue=s.queue(queue_id))
    if as_json:
        s.output(True).json(dict(handle.view.view))
    else:
        click.echo(handle.id)
