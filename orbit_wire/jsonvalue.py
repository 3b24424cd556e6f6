"""Validation of JSON values against the value rules (docs/protocol.md, "Values").

A value is non-null JSON, at most MAX_VALUE_BYTES encoded, nested at most MAX_VALUE_DEPTH,
with integers in signed 64-bit and finite other numbers. Results travel as *text* so the
exact number text a handler produced is kept; ``check_text`` validates text without
rewriting it. orjson silently turns integers wider than 64 bits into floats, so integer
range is checked on the text itself.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from typing import Any, cast

import orjson

from .errors import ErrorCode, ValueRejected
from .limits import INT64_MAX, INT64_MIN, MAX_VALUE_BYTES, MAX_VALUE_DEPTH

# Strings are matched (and skipped) so digits inside them are never taken for numbers.
_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|(?<![\d.eE+\-])-?\d{19,}(?![.eE\d])')
# The pre-check for a run of 19 digits: each ASCII digit byte mapped to "1", every other byte
# to "0", then a substring search; a tenth of a regex scan's cost on a batch submit's body.
_DIGIT_MASK = bytes(0x31 if 0x30 <= byte <= 0x39 else 0x30 for byte in range(256))
_LONG_RUN = b"1" * 19


def utf8_len(text: bytes | str) -> int:
    """The encoded size of JSON text, without copying ASCII text (the usual case)."""
    if isinstance(text, bytes) or text.isascii():
        return len(text)
    return len(text.encode())


def check_text(
    text: bytes | str,
    *,
    what: str = "value",
    max_bytes: int = MAX_VALUE_BYTES,
    allow_null: bool = False,
) -> Any:
    """Validate JSON text and return the parsed value; raise ValueRejected if it breaks a rule."""
    data = text.encode() if isinstance(text, str) else text
    if len(data) > max_bytes:
        raise ValueRejected(
            ErrorCode.PAYLOAD_TOO_LARGE, f"{what} is {len(data)} bytes; at most {max_bytes}"
        )
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        code = ErrorCode.NUMBER_OUT_OF_RANGE if "infinity" in str(exc) else ErrorCode.INVALID_JSON
        raise ValueRejected(code, f"{what} is not valid JSON: {exc.msg}") from None
    check_int_range(data, what=what)
    check_value(value, what=what, allow_null=allow_null)
    return value


def check_int_range(data: bytes, *, what: str = "value") -> None:
    """Raise NUMBER_OUT_OF_RANGE if JSON text ``data`` holds an integer outside signed 64-bit
    (orjson parses those as floats without a word). Cheap when no 19-digit run exists."""
    if _LONG_RUN not in data.translate(_DIGIT_MASK):
        return
    for match in _TOKEN.finditer(data):
        token = match.group()
        if token[:1] != b'"' and not INT64_MIN <= int(token) <= INT64_MAX:
            raise ValueRejected(
                ErrorCode.NUMBER_OUT_OF_RANGE, f"{what} has an integer outside signed 64-bit"
            )


def walk_json(value: Any, *, what: str = "value", max_depth: int = MAX_VALUE_DEPTH,
              containers: tuple[type, ...] = (dict, list),
              leaf: Callable[[Any], None] | None = None) -> None:
    """Visit ``value`` without recursion (a recursive walk would hit Python's own limit
    before ours): NESTING_TOO_DEEP for a container nested deeper than ``max_depth``, and
    ``leaf(item)`` for every item that is not one of ``containers`` (it may raise)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, containers):
            if depth > max_depth:
                raise ValueRejected(
                    ErrorCode.NESTING_TOO_DEEP, f"{what} is nested deeper than {max_depth} levels"
                )
            children = item.values() if isinstance(item, dict) else cast("Iterable[Any]", item)
            if leaf is None:
                stack.extend((child, depth + 1) for child in children
                             if isinstance(child, containers))
            else:
                stack.extend((child, depth + 1) for child in children)
        elif leaf is not None:
            leaf(item)


def check_value(value: Any, *, what: str = "value", allow_null: bool = False) -> None:
    """Validate an already-parsed value: not null, depth, integer range, finite floats."""
    if value is None and not allow_null:
        # A bad request, said as such: null is refused for its own sake, not as a result.
        raise ValueRejected(
            ErrorCode.BAD_REQUEST, f"{what} must not be null (any other JSON value, e.g. {{}})"
        )

    def scalar(item: Any) -> None:
        if isinstance(item, bool) or item is None or isinstance(item, str):
            return
        if isinstance(item, int):
            if not INT64_MIN <= item <= INT64_MAX:
                raise ValueRejected(
                    ErrorCode.NUMBER_OUT_OF_RANGE, f"{what} has an integer outside signed 64-bit"
                )
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise ValueRejected(
                    ErrorCode.NUMBER_OUT_OF_RANGE, f"{what} has a non-finite number"
                )
        else:
            raise ValueRejected(
                ErrorCode.INVALID_JSON, f"{what} holds a {type(item).__name__}, not JSON"
            )

    walk_json(value, what=what, leaf=scalar)


def encode_value(value: Any, *, what: str = "value", allow_null: bool = False) -> bytes:
    """Validate a parsed value and encode it; the size limit applies to the encoding."""
    check_value(value, what=what, allow_null=allow_null)
    try:
        data = orjson.dumps(value)
    except TypeError as exc:
        raise ValueRejected(ErrorCode.INVALID_JSON, f"{what} cannot be encoded: {exc}") from None
    if len(data) > MAX_VALUE_BYTES:
        raise ValueRejected(
            ErrorCode.PAYLOAD_TOO_LARGE, f"{what} is {len(data)} bytes; at most {MAX_VALUE_BYTES}"
        )
    return data
