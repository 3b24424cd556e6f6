"""Request bodies as msgspec Structs, checked and described by one definition.

A body is a frozen Struct that refuses unknown fields (``forbid_unknown_fields``); a field
absent from a body takes its default or stays ``UNSET``, and ``null`` is refused for every
field not typed nullable (null is not a second spelling of "absent"). The limits stand beside
the fields (``Annotated[int, Meta(ge=..., le=...)]``, the shared field types below), so
``Body.load`` checks a parsed JSON value in one pass (``msgspec.convert``) and the OpenAPI
document's schemas come from the same Structs (orbit_server/openapi.py): the docs cannot
drift from the validators. A refusal is OrbitError BAD_REQUEST naming the field and its rule
(orbit_wire/explain.py reads it from the same Meta). Rules no field type can say (a payload's
encoded size, one field excluding another) stay with the caller; their JSON Schema side is
the Body's ``rules``. As in JSON Schema, ``7.0`` is the integer 7. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Generic, TypeVar

import msgspec
from msgspec import Meta, Struct

from orbit_wire.errors import ErrorCode, OrbitError
from orbit_wire.explain import explain, path_of
from orbit_wire.limits import MAX_NAME_LEN
from orbit_wire.names import Id

__all__ = ["Body", "IdList", "Instant", "Label", "Reason"]

MAX_REASON_LEN = 1024
MAX_INSTANT_MS = 2**62 - 1
MAX_IDS = 1000

# A queue's, a credential's or a schedule's name: any text, for people.
Label = Annotated[str, Meta(min_length=1, max_length=MAX_NAME_LEN)]
Reason = Annotated[str, Meta(max_length=MAX_REASON_LEN)]
Instant = Annotated[int, Meta(ge=0, le=MAX_INSTANT_MS, description="a future instant (ms "
                              "since the epoch): refused from then on")]
IdList = Annotated[list[Id], Meta(max_length=MAX_IDS, extra={
    "message": f"must be a list of at most {MAX_IDS} 32-character hex IDs"})]

S = TypeVar("S", bound=Struct)
_INT_GOT_FLOAT = re.compile(r"Expected `int( \| null)?`, got `float`")


class Body(Generic[S]):
    """A request body: its Struct, and the JSON Schema keywords of its rules across fields
    (``rules``, e.g. ``{"not": {"required": [a, b]}}``), which openapi.py adds to the
    Struct's schema. The caller checks those rules after ``load``."""

    __slots__ = ("rules", "struct")

    def __init__(self, struct: type[S], rules: Mapping[str, Any] | None = None) -> None:
        self.struct = struct
        self.rules: Mapping[str, Any] = rules or {}

    def load(self, value: object, where: str) -> S:
        """``value`` (parsed JSON) as the body's Struct; OrbitError BAD_REQUEST
        ``<where>[.<object>]: <field> <rule>`` when it breaks a field's type or rule."""
        while True:
            try:
                return msgspec.convert(value, self.struct)
            except msgspec.ValidationError as exc:
                integral = _integral(exc, value)
                if integral is None:
                    message = explain(exc, self.struct, value, where).message
                    raise OrbitError(ErrorCode.BAD_REQUEST, message) from None
                value = integral

    def parse(self, value: object, where: str) -> dict[str, Any]:
        """The fields ``value`` gives (absent ones absent), each as ``load`` read it."""
        body = self.load(value, where)
        assert isinstance(value, dict)  # a Struct loads from an object only
        return {key: getattr(body, key) for key in value}


def _integral(error: msgspec.ValidationError, value: Any) -> Any:
    """``value`` with the float an integer field refused turned into that integer when it
    has no fraction (JSON Schema's reading of ``7.0``); None when that is not the refusal."""
    if not _INT_GOT_FLOAT.match(str(error)):
        return None
    steps = path_of(error)
    if not steps:
        return None
    number = _at(value, steps)
    if not isinstance(number, float) or not number.is_integer():
        return None
    return _replaced(value, steps, int(number))


def _at(value: Any, steps: list[str | int]) -> Any:
    for step in steps:
        value = value[step]
    return value


def _replaced(value: Any, steps: list[str | int], new: Any) -> Any:
    """A copy of ``value`` with ``new`` at ``steps`` (the caller's value is not changed)."""
    if not steps:
        return new
    head, rest = steps[0], steps[1:]
    if isinstance(value, dict):
        return {**value, head: _replaced(value[head], rest, new)}
    copy = list(value)
    copy[head] = _replaced(copy[head], rest, new)  # type: ignore[index]
    return copy
