"""Argument helpers shared by commands: JSON values given inline, as @FILE or as @-; a
capability given by its handler name alone; a tri-state idempotency."""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import click
import orjson

from orbit_wire.errors import ErrorCode, OrbitError
from orbit_wire.jsonvalue import check_text

from ..capabilities import choose_versions
from ..client import OrbitClient

F = TypeVar("F", bound=Callable[..., Any])

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

idempotent_option = click.option(
    "--idempotent/--not-idempotent", default=None,
    help="Safe (or not) to retry after an uncertain outcome (default: as its TaskType "
         "declares, else not idempotent).")


def stacked(*decorators: Callable[[Any], Any]) -> Callable[[F], F]:
    """One decorator that stands for ``decorators`` written one above the other, in this
    order (click lists the options of a command in the order they are written)."""
    def apply(fn: F) -> F:
        for decorate in reversed(decorators):
            fn = decorate(fn)
        return fn
    return apply


# --handler, and the versions: found from the queue's registered capabilities when left
# out (``capability_of``).
handler_options = stacked(
    click.option("--handler", required=True, help="Capability: handler name."),
    click.option("--handler-version", default=None,
                 help="Capability: handler version (default: the one registered for "
                      "the handler in the queue, if there is one)."),
    click.option("--payload-version", default=None,
                 help="Capability: payload version (default: as --handler-version)."),
)


def idempotency_of(idempotent: bool | None) -> str | None:
    """The TaskSpec idempotency for --idempotent/--not-idempotent (None: not given)."""
    if idempotent is None:
        return None
    return "IDEMPOTENT" if idempotent else "NON_IDEMPOTENT"


def capability_of(client: OrbitClient, queue_id: str, handler: str,
                  handler_version: str | None, payload_version: str | None
                  ) -> dict[str, str]:
    """The capability fields of a spec: as given, or the versions the queue registered for
    the handler when one is left out (NOT_FOUND or BAD_REQUEST listing the choices)."""
    if handler_version is None or payload_version is None:
        handler_version, payload_version = choose_versions(
            client.capabilities(queue_id), handler, handler_version, payload_version)
    return {"handler": handler, "handler_version": handler_version,
            "payload_version": payload_version}


def json_argument(text: str, what: str) -> orjson.Fragment:
    """A JSON value given inline, as @FILE, or as @- (stdin); checked, kept as exact text."""
    return orjson.Fragment(read_argument(text, what))


def read_argument(text: str, what: str) -> bytes:
    """The JSON text given inline, as @FILE, or as @- (stdin), checked by the value rules."""
    if text.startswith("@"):
        name = text[1:]
        try:
            data = sys.stdin.buffer.read() if name == "-" else Path(name).read_bytes()
        except OSError as exc:
            raise OrbitError(ErrorCode.BAD_REQUEST, f"{what} file {name}: {exc.strerror}") from None
    else:
        data = text.encode()
    check_text(data, what=what)
    return data.strip()


_AGO_UNITS_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}


def parse_instant(text: str, now_ms: int, option: str) -> int:
    """An instant for a time filter, as epoch ms: ``15m``, ``2h``, ``3d``, ``1w`` (that long
    ago), an ISO date or date-time (UTC unless it names an offset: ``2026-12-02``,
    ``2026-12-02T03:00``, ``2026-12-02T03:00+01:00``), or epoch milliseconds."""
    raw = text.strip()
    unit = raw[-1:].lower()
    if unit in _AGO_UNITS_MS and raw[:-1].isdigit():
        return max(0, now_ms - int(raw[:-1]) * _AGO_UNITS_MS[unit])
    if raw.isdigit():
        return int(raw)
    try:
        when = datetime.fromisoformat(raw)
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is not a time: use 15m, 2h, 3d or 1w (ago), an ISO date or date-time "
            "(2026-12-02, 2026-12-02T03:00, UTC unless an offset is given), or epoch ms",
            param_hint=option,
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)
