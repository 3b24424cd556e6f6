"""Request-body fields that validate a value AND describe themselves as JSON Schema, so the
OpenAPI document (orbit_server/openapi.py) is generated from the very definitions that check
requests and cannot drift from them.

An ``Obj`` refuses unknown fields (``additionalProperties: false``), a missing required one,
and ``null`` for any field not declared ``nullable`` (absent means the default; null is not a
second spelling of it). Rules JSON Schema cannot say (a payload's encoded size, one field
excluding another) stay with the caller and are named in the schema's ``description``.
Pure: no I/O.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from orbit_wire.errors import ErrorCode, OrbitError
from orbit_wire.ids import is_id


class Field(Protocol):
    @property
    def nullable(self) -> bool: ...

    def check(self, value: object, key: str) -> str | None:
        """None when ``value`` (not null) is valid, else what is wrong, after the key."""

    def schema(self) -> dict[str, Any]: ...


def _typed(schema: dict[str, Any], nullable: bool, description: str) -> dict[str, Any]:
    if nullable:
        kind = schema["type"]
        schema["type"] = [*kind, "null"] if isinstance(kind, list) else [kind, "null"]
    if description:
        schema["description"] = description
    return schema


@dataclass(frozen=True, slots=True)
class Str:
    """A string of ``min_len``-``max_len`` characters, matching ``pattern`` when given (a
    regex in the subset JSON Schema and Python agree on: classes, quantifiers, anchors)."""

    max_len: int
    min_len: int = 1
    pattern: str | None = None
    nullable: bool = False
    description: str = ""
    message: str = ""

    def check(self, value: object, key: str) -> str | None:
        if (isinstance(value, str) and self.min_len <= len(value) <= self.max_len
                and (self.pattern is None or _compiled(self.pattern).fullmatch(value))):
            return None
        if self.message:
            return f"{key} {self.message}"
        return (f"{key} must be a string of {self.min_len}-{self.max_len} "
                                "characters" + (f" matching {self.pattern}"
                                                if self.pattern else ""))

    def schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "string", "minLength": self.min_len,
                               "maxLength": self.max_len}
        if self.pattern is not None:
            out["pattern"] = f"^{self.pattern}$"
        return _typed(out, self.nullable, self.description)


@dataclass(frozen=True, slots=True)
class Int:
    """An integer in [lo, hi]; as in JSON Schema, ``7.0`` is the integer 7 (``Obj.parse``
    hands it on as an int)."""

    lo: int
    hi: int
    default: int | None = None
    nullable: bool = False
    description: str = ""

    def check(self, value: object, key: str) -> str | None:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, int) and not isinstance(value, bool) and self.lo <= value <= self.hi:
            return None
        return f"{key} must be an integer in [{self.lo}, {self.hi}]"

    def schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "integer", "minimum": self.lo, "maximum": self.hi}
        if self.default is not None:
            out["default"] = self.default
        return _typed(out, self.nullable, self.description)


@dataclass(frozen=True, slots=True)
class Num:
    lo: float
    hi: float
    default: float | None = None
    nullable: bool = False
    description: str = ""

    def check(self, value: object, key: str) -> str | None:
        if (isinstance(value, (int, float)) and not isinstance(value, bool)
                and math.isfinite(value) and self.lo <= value <= self.hi):
            return None
        return f"{key} must be a number in [{self.lo}, {self.hi}]"

    def schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "number", "minimum": self.lo, "maximum": self.hi}
        if self.default is not None:
            out["default"] = self.default
        return _typed(out, self.nullable, self.description)


@dataclass(frozen=True, slots=True)
class Enum:
    values: tuple[str, ...]
    default: str | None = None
    nullable: bool = False
    description: str = ""

    def check(self, value: object, key: str) -> str | None:
        if isinstance(value, str) and value in self.values:
            return None
        return f"{key} must be one of {', '.join(self.values)}"

    def schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "string", "enum": list(self.values)}
        if self.default is not None:
            out["default"] = self.default
        return _typed(out, self.nullable, self.description)


@dataclass(frozen=True, slots=True)
class Bool:
    default: bool | None = None
    nullable: bool = False
    description: str = ""

    def check(self, value: object, key: str) -> str | None:
        return None if isinstance(value, bool) else f"{key} must be a boolean"

    def schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "boolean"}
        if self.default is not None:
            out["default"] = self.default
        return _typed(out, self.nullable, self.description)


ID_PATTERN = "[0-9a-f]{32}"


@dataclass(frozen=True, slots=True)
class IdList:
    max_items: int = 1000
    nullable: bool = False
    description: str = ""

    def check(self, value: object, key: str) -> str | None:
        if (isinstance(value, list) and len(value) <= self.max_items
                and all(is_id(item) for item in value)):
            return None
        return f"{key} must be a list of at most {self.max_items} 32-character hex IDs"

    def schema(self) -> dict[str, Any]:
        return _typed({"type": "array", "maxItems": self.max_items,
                       "items": {"type": "string", "pattern": f"^{ID_PATTERN}$"}},
                      self.nullable, self.description)


@dataclass(frozen=True, slots=True)
class Items:
    """A list of ``min_items``-``max_items`` values of one field."""

    of: Field
    min_items: int
    max_items: int
    nullable: bool = False
    description: str = ""

    def check(self, value: object, key: str) -> str | None:
        if not isinstance(value, list) or not self.min_items <= len(value) <= self.max_items:
            return f"{key} must be a list of {self.min_items}-{self.max_items} items"
        for index, item in enumerate(value):
            problem = (f"{key}[{index}] may not be null" if item is None
                       else self.of.check(item, f"{key}[{index}]"))
            if problem is not None:
                return problem
        return None

    def schema(self) -> dict[str, Any]:
        return _typed({"type": "array", "items": self.of.schema(), "minItems": self.min_items,
                       "maxItems": self.max_items}, self.nullable, self.description)


@dataclass(frozen=True, slots=True)
class Value:
    """Any JSON value; the value rules (size, depth, number range) are the caller's."""

    nullable: bool = False
    description: str = ""

    def check(self, value: object, key: str) -> str | None:
        return None

    def schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {} if self.nullable else {"not": {"type": "null"}}
        if self.description:
            out["description"] = self.description
        return out


@dataclass(frozen=True, slots=True)
class Obj:
    """A JSON object of exactly these fields; ``required`` must be present."""

    fields: Mapping[str, Field]
    required: tuple[str, ...] = ()
    nullable: bool = False
    description: str = ""
    # Extra schema keywords for rules across fields (e.g. {"not": {"required": [a, b]}}).
    extra: Mapping[str, Any] = field(default_factory=dict)

    def check(self, value: object, key: str) -> str | None:
        try:
            self.parse(value, key)
        except OrbitError as exc:
            return exc.message
        return None

    def parse(self, value: object, where: str) -> dict[str, Any]:
        """The object's fields as given (absent ones absent); BAD_REQUEST ``where: ...``."""
        if not isinstance(value, Mapping):
            raise _bad(where, "must be a JSON object")
        if not self.fields.keys() >= value.keys():
            unknown = sorted(str(k) for k in value if k not in self.fields)
            raise _bad(where, f"has unknown field(s): {', '.join(unknown)}")
        for key in self.required:
            if key not in value:
                raise _bad(where, f"{key} is required")
        out = dict(value)
        for key, item in value.items():
            spec = self.fields[key]
            if item is None:
                if spec.nullable:
                    continue
                raise _bad(where, f"{key} may not be null (leave it out for the default)")
            if isinstance(spec, Obj):
                out[key] = spec.parse(item, f"{where}.{key}" if where else key)
                continue
            problem = spec.check(item, key)
            if problem is not None:
                raise _bad(where, problem)
            if isinstance(spec, Int) and isinstance(item, float):
                out[key] = int(item)
        return out

    def schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": ["object", "null"] if self.nullable else "object",
            "properties": {key: spec.schema() for key, spec in self.fields.items()},
            "additionalProperties": False,
        }
        if self.required:
            out["required"] = list(self.required)
        if self.description:
            out["description"] = self.description
        out.update(self.extra)
        return out


@functools.cache
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)  # a Str checks every submitted name: compile its pattern once


def _bad(where: str, message: str) -> OrbitError:
    return OrbitError(ErrorCode.BAD_REQUEST, f"{where}: {message}" if where else message)
