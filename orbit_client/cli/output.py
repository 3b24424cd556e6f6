"""Where a command's answer goes, and in which form: human (rich) or JSON.

The form is chosen once per command: ``--json`` on the command, else the global
``--output``/``ORBIT_OUTPUT`` (``auto``, ``human``, ``json``); ``auto`` is human on a terminal
and JSON when stdout is a pipe or a file, so scripts get a stable, parseable answer without
asking for it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click
import orjson
from rich.console import Console, RenderableType
from rich.measure import Measurement

OUTPUT_MODES = ("auto", "human", "json")
_UNBOUNDED = 10_000  # columns: wide enough to measure what a view needs at the least

F = TypeVar("F", bound=Callable[..., Any])


def json_option(func: F) -> F:
    """The ``--json`` flag every command has."""
    return click.option(
        "--json", "as_json", is_flag=True, help="Print the answer as JSON (the default on a pipe)."
    )(func)


def human_wanted(mode: str, as_json: bool) -> bool:
    if as_json or mode == "json":
        return False
    return mode == "human" or sys.stdout.isatty()


class Output:
    """One command's printer. ``human`` says which form the command should produce."""

    def __init__(self, human: bool, console: Console | None = None):
        self.human = human
        self._console = console

    @property
    def console(self) -> Console:
        if self._console is None:
            # No syntax highlighting of numbers and IDs: colour carries the states only.
            self._console = Console(highlight=False, soft_wrap=False)
        return self._console

    def show(self, renderable: RenderableType) -> None:
        """Print for people; a table wider than the terminal is printed wider (the terminal
        folds its lines) rather than cut: an ID is never shortened."""
        console = self.console
        needed = Measurement.get(console, console.options.update_width(_UNBOUNDED),
                                 renderable).minimum
        width = console.width
        if needed <= width:
            console.print(renderable)
            return
        console.width = needed  # print(width=) cannot go past the console's own width
        try:
            console.print(renderable)
        finally:
            console.width = width

    def line(self, text: str) -> None:
        """A plain line (an ID, a word) in either form: exactly ``text`` and a newline."""
        click.echo(text)

    def json(self, value: Any) -> None:
        click.echo(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode())


def task_for_json(task: dict[str, Any]) -> dict[str, Any]:
    """The task as the server sent it: the result exactly as the handler produced it
    (``1.10`` stays ``1.10``), not re-encoded from parsed floats."""
    task = dict(task)
    raw = task.pop("result_json", None)
    if raw is not None:
        task["result"] = orjson.Fragment(raw)
    return task
