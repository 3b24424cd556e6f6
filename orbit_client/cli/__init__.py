"""The ``orbit`` command: parses arguments, calls OrbitClient, prints the answer for people
(on a terminal) or as JSON (on a pipe, or with --json). docs/cli.md documents every command.

    app.py          the root group: global options, client, output form, default queue, errors
    exits.py        exit codes and the next step every error line ends with
    output.py       human or JSON, and the printer
    render.py       human views of answers (pure)        timefmt.py   relative times (pure)
    waiting.py      --wait with a progress line          args.py      shared options, JSON args
    health.py, queues.py, credentials.py, tasks.py, workers.py, schedules.py, limits.py,
    workflows.py    one module per group (render_schedules.py, render_workflows.py: their views)
    task_list.py    `orbit tasks list`: filters, time arguments, paging

A new command group is a module with a click group, added to ``cli`` below.
"""

from __future__ import annotations

from .app import cli
from .credentials import credentials
from .exits import exit_code_for
from .health import health
from .limits import limits
from .queues import queues
from .schedules import schedules
from .task_bulk import tasks_cancel, tasks_review
from .task_list import tasks_list
from .task_retry import tasks_retry
from .tasks import tasks
from .workers import workers
from .workflows import workflows

tasks.add_command(tasks_list)
tasks.add_command(tasks_retry)
tasks.add_command(tasks_cancel)
tasks.add_command(tasks_review)
for _command in (health, queues, credentials, tasks, workers, schedules, limits, workflows):
    cli.add_command(_command)


def main() -> None:
    cli(prog_name="orbit")


__all__ = ["cli", "exit_code_for", "main"]
