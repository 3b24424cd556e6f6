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
from rich.console import Console, Group, RenderableType
from rich.measure import Measurement
from rich.table import Table

OUTPUT_MODES = ("auto", "human", "json")
_UNBOUNDED = 10_000  # columns: wide enough to measure what a view needs at the least
_PADDING = 3  # a table column's padding (two), and a column of room for rich's rounding

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
        needed = _needed_width(console, renderable)
        width = console.width
        if needed <= width:
            console.print(renderable)
            return
        console.width = needed  # print(width=) cannot go past the console's own width
        try:
            console.print(renderable)
        finally:
            console.width = width

    def show_or_json(self, value: Any, view: Callable[[], RenderableType]) -> None:
        """``view()`` for people, else ``value`` as JSON."""
        if self.human:
            self.show(view())
        else:
            self.json(value)

    def line(self, text: str) -> None:
        """A plain line (an ID, a word) in either form: exactly ``text`` and a newline."""
        click.echo(text)

    def json(self, value: Any) -> None:
        click.echo(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode())


def _needed_width(console: Console, renderable: RenderableType) -> int:
    """The width a view needs so that no column that must not wrap (an ID) is cut: such a
    column at its widest cell, every other at its longest word, plus padding."""
    if isinstance(renderable, Group):
        return max((_needed_width(console, r) for r in renderable.renderables), default=0)
    if not isinstance(renderable, Table):
        return 0
    options = console.options.update_width(_UNBOUNDED)
    total = 0
    for column in renderable.columns:
        sizes = [Measurement.get(console, options, cell) for cell in (column.header,
                                                                     *column.cells)]
        total += max(m.maximum if column.no_wrap else m.minimum for m in sizes) + _PADDING
    return total


def task_for_json(task: dict[str, Any]) -> dict[str, Any]:
    """The task as the server sent it: the result exactly as the handler produced it
    (``1.10`` stays ``1.10``), not re-encoded from parsed floats."""
    task = dict(task)
    raw = task.pop("result_json", None)
    if raw is not None:
        task["result"] = orjson.Fragment(raw)
    return task
