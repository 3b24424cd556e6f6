"""Argument helpers shared by commands: JSON values given inline, as @FILE or as @-."""

from __future__ import annotations

import sys
from pathlib import Path

import click
import orjson

from orbit_wire.errors import ErrorCode, OrbitError
from orbit_wire.jsonvalue import check_text

wait_option = click.option(
    "--wait",
    "wait_s",
    type=click.FloatRange(min=0),
    default=None,
    metavar="SECONDS",
    help="Wait up to SECONDS for the task to finish or need review; the exit code says how "
         "it ended (0 SUCCEEDED, 10 FAILED, 11 NEEDS_REVIEW, 12 CANCELLED, 13 not yet).",
)

queue_option = click.option(
    "--queue", "queue_id", default=None,
    help="Queue ID (default: the credential's queue, when it has exactly one).",
)


def json_argument(text: str, what: str) -> orjson.Fragment:
    """A JSON value given inline, as @FILE, or as @- (stdin); checked, kept as exact text."""
    if text.startswith("@"):
        name = text[1:]
        try:
            data = sys.stdin.buffer.read() if name == "-" else Path(name).read_bytes()
        except OSError as exc:
            raise OrbitError(ErrorCode.BAD_REQUEST, f"{what} file {name}: {exc.strerror}") from None
    else:
        data = text.encode()
    check_text(data, what=what)
    return orjson.Fragment(data.strip())
