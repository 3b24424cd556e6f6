"""Query parameters: each route declares the ones it takes, and one parser reads them all,
refusing what the OpenAPI document's parameter schemas refuse (BAD_REQUEST naming the
parameter). Pure.

A parameter not declared is refused; a declared one missing takes its default. A scalar
parameter may be given once; an integer is ASCII digits within its bounds (an empty value is
not an integer, so ``?windows=`` is refused, not read as absent); an ID is 32 lowercase hex
characters; a choice is one of its words; a text is at most ``MAX_TEXT`` characters, and
empty reads as absent (an empty string is a valid text, and filters nothing).
tests/unit/server/test_query_params.py checks every route's parameters against its schema.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from orbit_wire.errors import ErrorCode, OrbitError
from orbit_wire.ids import is_id

# Each parameter name to its values in the order given (repeats kept), as a URL query has.
Query = Mapping[str, Sequence[str]]
MAX_TEXT = 256


def bad_parameter(message: str) -> OrbitError:
    return OrbitError(ErrorCode.BAD_REQUEST, message)


class Param(Protocol):
    """One declared parameter: its name, and what its values read as (``parse`` is called
    only when the parameter was given)."""

    @property
    def name(self) -> str: ...

    @property
    def default(self) -> Any: ...

    def parse(self, values: Sequence[str]) -> Any: ...


def once(name: str, values: Sequence[str]) -> str:
    """The single value of a scalar parameter."""
    if len(values) != 1:
        raise bad_parameter(f"{name} may be given once")
    return values[0]


@dataclass(frozen=True, slots=True)
class Int:
    """An integer in [lo, hi]."""

    name: str
    lo: int
    hi: int
    default: int | None = None

    def parse(self, values: Sequence[str]) -> int:
        raw = once(self.name, values)
        if not (raw.isascii() and raw.isdigit()) or not self.lo <= int(raw) <= self.hi:
            raise bad_parameter(f"{self.name} must be an integer in [{self.lo}, {self.hi}]")
        return int(raw)


@dataclass(frozen=True, slots=True)
class Id:
    """A 32-character lowercase hex ID."""

    name: str
    default: None = None

    def parse(self, values: Sequence[str]) -> str:
        raw = once(self.name, values)
        if not is_id(raw):
            raise bad_parameter(f"{self.name} must be a 32-character lowercase hex ID")
        return raw


@dataclass(frozen=True, slots=True)
class Text:
    """A text of at most ``MAX_TEXT`` characters; empty reads as absent (None)."""

    name: str
    default: None = None

    def parse(self, values: Sequence[str]) -> str | None:
        raw = once(self.name, values)
        if len(raw) > MAX_TEXT:
            raise bad_parameter(f"{self.name} is longer than {MAX_TEXT} characters")
        return raw or None


@dataclass(frozen=True, slots=True)
class Choice:
    """One of ``choices``."""

    name: str
    choices: tuple[str, ...]
    default: str

    def parse(self, values: Sequence[str]) -> str:
        raw = once(self.name, values)
        if raw not in self.choices:
            raise bad_parameter(f"{self.name} must be {' or '.join(self.choices)}")
        return raw


def parse_query(params: Query, declared: Sequence[Param]) -> dict[str, Any]:
    """Every declared parameter by name (its default when not given); BAD_REQUEST for an
    undeclared parameter or a value its declaration refuses."""
    by_name = {param.name: param for param in declared}
    unknown = sorted(name for name in params if name not in by_name)
    if unknown:
        raise bad_parameter(f"unknown parameter(s): {', '.join(unknown)}")
    return {name: param.parse(params[name]) if name in params else param.default
            for name, param in by_name.items()}
