"""Why msgspec refused a value, said the way Orbit says it.

``explain`` turns a ``msgspec.ValidationError`` into one sentence that names the field and
states its rule, read from the type beside the field: the field's own message
(``Meta(extra={"message": ...})``), else its range, length or choices. The frames
(``frames.py``) and the server's request bodies both speak through it, so a limit is written
once, beside its field, and every refusal of it reads the same::

    frame.ops[0]: epoch must be an integer in [1, 9223372036854775807]
    task.backoff: has unknown field(s): another, extra

Pure: no I/O.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import msgspec
from msgspec import inspect as mi

__all__ = ["Explanation", "Refusal", "explain", "path_of"]

NOT_NULL = "may not be null (leave it out for the default)"
_AT = " - at `"
_STEP = re.compile(r"\.([^.\[]+)|\[(\d+)\]")
_QUOTED = re.compile(r"`([^`]*)`")


class Refusal(StrEnum):
    VALUE = "VALUE"  # a field breaks its type or rule, or an object its shape
    UNKNOWN_TAG = "UNKNOWN_TAG"  # a tag (a frame's ``type``, an op's ``op``) names no kind
    TOO_MANY = "TOO_MANY"  # a list longer than its bound


@dataclass(frozen=True, slots=True)
class Explanation:
    refusal: Refusal
    message: str


def path_of(error: msgspec.ValidationError) -> list[str | int] | None:
    """The steps (field names, list indices) to the refused value; None when msgspec's
    message names no path of fields (a dict key, say)."""
    text = str(error)
    at = text.rfind(_AT)
    if at < 0:
        return []
    path = text[at + len(_AT):].rstrip("`")
    if not path.startswith("$"):
        return None
    steps: list[str | int] = []
    pos = 1
    for match in _STEP.finditer(path, 1):
        if match.start() != pos:
            return None
        name, index = match.groups()
        steps.append(int(index) if index is not None else name)
        pos = match.end()
    return steps if pos == len(path) else None


def explain(error: msgspec.ValidationError, root: Any, value: Any, where: str) -> Explanation:
    """One sentence for ``error``, raised decoding ``value`` (its JSON, as parsed) as type
    ``root``; ``where`` names the whole value ("frame", "task", "request body")."""
    text = str(error)
    problem = text[:at] if (at := text.rfind(_AT)) >= 0 else text
    steps = path_of(error)
    if problem.startswith("Invalid value") and steps:  # a tag no kind has (not a field)
        owner, tag = _place(where, steps[:-1]), steps[-1]
        return Explanation(Refusal.UNKNOWN_TAG,
                           f"{owner}: {tag} {_value_at(value, steps)!r} is not known")
    walked = None if steps is None else _walk(_info(root), value, steps)
    if steps is None or walked is None:
        return Explanation(Refusal.VALUE, f"{where}: {text}")
    field, leaf, leaf_value = walked
    here = _place(where, steps)
    if problem.startswith("Object missing required field"):
        return Explanation(Refusal.VALUE, f"{here}: {_quoted(problem)} is required")
    if problem.startswith("Object contains unknown field"):
        known = {f.encode_name for f in getattr(_resolve(leaf, leaf_value), "fields", ())}
        unknown = (sorted(str(k) for k in leaf_value if k not in known)
                   if isinstance(leaf_value, dict) else [_quoted(problem)])
        return Explanation(Refusal.VALUE, f"{here}: has unknown field(s): {', '.join(unknown)}")
    keyed = [i for i, step in enumerate(steps) if isinstance(step, str)]
    if not keyed:
        rule = _rule(leaf, leaf_value) if "got `null`" not in problem else "may not be null"
        return Explanation(Refusal.VALUE, f"{here}: {rule}")
    key_at = keyed[-1]
    owner = _place(where, steps[:key_at])
    name = "".join(str(s) if isinstance(s, str) else f"[{s}]" for s in steps[key_at:])
    if "got `null`" in problem:
        rule = NOT_NULL if key_at == len(steps) - 1 else "may not be null"
    elif problem.startswith("Expected `object`") and _is_object(_resolve(leaf, leaf_value)):
        return Explanation(Refusal.VALUE, f"{here}: must be a JSON object")
    else:
        rule = _message(field) or _rule(leaf, leaf_value)
        if _message(field) is not None:
            name = str(steps[key_at])
    refusal = (Refusal.TOO_MANY if problem.startswith("Expected `array` of length <=")
               else Refusal.VALUE)
    return Explanation(refusal, f"{owner}: {name} {rule}")


@functools.cache
def _info(root: Any) -> mi.Type:
    return mi.type_info(root)


def _place(where: str, steps: list[str | int]) -> str:
    return where + "".join(f".{s}" if isinstance(s, str) else f"[{s}]" for s in steps)


def _quoted(problem: str) -> str:
    found = _QUOTED.search(problem)
    return found.group(1) if found else problem


def _value_at(value: Any, steps: list[str | int]) -> Any:
    for step in steps:
        if isinstance(step, str) and isinstance(value, dict):
            value = value.get(step)
        elif isinstance(step, int) and isinstance(value, list) and step < len(value):
            value = value[step]
        else:
            return None
    return value


def _walk(t: mi.Type, value: Any, steps: list[str | int]
          ) -> tuple[mi.Type | None, mi.Type, Any] | None:
    """Follow ``steps`` through type and value: the type of the last field named on the way
    (with its Meta), the type at the end, and the value there (None if absent)."""
    field: mi.Type | None = None
    for step in steps:
        kind = _resolve(t, value)
        if isinstance(step, str):
            found = [f for f in getattr(kind, "fields", ()) if f.encode_name == step]
            if not found:
                return None
            t = field = found[0].type
            value = value.get(step) if isinstance(value, dict) else None
        elif isinstance(kind, mi.CollectionType):
            t = kind.item_type
            value = value[step] if isinstance(value, list) and step < len(value) else None
        else:
            return None
    return field, t, value


def _resolve(t: mi.Type, value: Any) -> mi.Type:
    """``t`` without its Meta, and the member of a union ``value`` belongs to: by tag for
    tagged structs, else the member that is not None (or unset)."""
    while isinstance(t, mi.Metadata):
        t = t.type
    if not isinstance(t, mi.UnionType):
        return t
    members = [_resolve(m, value) for m in t.types]
    if value is None:
        nulls = [m for m in members if isinstance(m, mi.NoneType)]
        if nulls:
            return nulls[0]
    for member in members:
        if (isinstance(member, mi.StructType) and member.tag_field is not None
                and isinstance(value, dict) and value.get(member.tag_field) == member.tag):
            return member
    rest = [m for m in members if not isinstance(m, mi.NoneType)]
    return rest[0] if len(rest) == 1 else t


def _message(t: mi.Type | None) -> str | None:
    """The field's own message, found through its Meta and an optional's union."""
    while t is not None:
        if isinstance(t, mi.Metadata):
            if isinstance(t.extra, dict) and "message" in t.extra:
                return str(t.extra["message"])
            t = t.type
        elif isinstance(t, mi.UnionType):
            rest = [m for m in t.types if not isinstance(m, mi.NoneType)]
            t = rest[0] if len(rest) == 1 else None
        else:
            return None
    return None


def _is_object(t: mi.Type) -> bool:
    if isinstance(t, mi.UnionType):
        return all(_is_object(m) for m in t.types)
    return isinstance(t, mi.StructType | mi.DataclassType | mi.TypedDictType | mi.DictType)


def _rule(t: mi.Type, value: Any) -> str:
    own = _message(t)
    if own is not None:
        return own
    kind = _resolve(t, value)
    if isinstance(kind, mi.IntType | mi.FloatType):
        noun = "an integer" if isinstance(kind, mi.IntType) else "a number"
        return f"must be {noun} in [{kind.ge}, {kind.le}]"
    if isinstance(kind, mi.StrType):
        if kind.pattern is not None:
            return "has an invalid form"
        return f"must be a string of {kind.min_length or 0}-{kind.max_length} characters"
    if isinstance(kind, mi.BoolType):
        return "must be a boolean"
    if isinstance(kind, mi.EnumType):
        return f"must be one of {', '.join(str(m.value) for m in kind.cls)}"
    if isinstance(kind, mi.LiteralType):
        return f"must be one of {', '.join(str(v) for v in kind.values)}"
    if isinstance(kind, mi.CollectionType):
        return f"must be a list of {kind.min_length or 0}-{kind.max_length} items"
    if _is_object(kind):
        return "must be a JSON object"
    return "is not valid"
