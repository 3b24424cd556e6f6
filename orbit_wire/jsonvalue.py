"""Validation of JSON values against the rules of SPEC §3.

A value is non-null JSON, at most MAX_VALUE_BYTES encoded, nested at most MAX_VALUE_DEPTH,
with integers in signed 64-bit and finite other numbers. Results travel as *text* so the
exact number text a handler produced is kept; ``check_text`` validates text without
rewriting it. orjson silently turns integers wider than 64 bits into floats, so integer
range is checked on the text itself.
"""

from __future__ import annotations

import math
import re
from typing import Any

import orjson

from .errors import ErrorCode, ValueRejected
from .limits import INT64_MAX, INT64_MIN, MAX_VALUE_BYTES, MAX_VALUE_DEPTH

# Strings are matched (and skipped) so digits inside them are never taken for numbers.
_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|(?<![\d.eE+\-])-?\d{19,}(?![.eE\d])')
_LONG_DIGITS = re.compile(rb"\d{19,}")


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
    if _LONG_DIGITS.search(data):
        for match in _TOKEN.finditer(data):
            token = match.group()
            if token[:1] != b'"' and not INT64_MIN <= int(token) <= INT64_MAX:
                raise ValueRejected(
                    ErrorCode.NUMBER_OUT_OF_RANGE, f"{what} has an integer outside signed 64-bit"
                )
    check_value(value, what=what, allow_null=allow_null)
    return value


def check_value(value: Any, *, what: str = "value", allow_null: bool = False) -> None:
    """Validate an already-parsed value: not null, depth, integer range, finite floats."""
    if value is None and not allow_null:
        raise ValueRejected(ErrorCode.INVALID_RESULT, f"{what} must not be null")
    # Iterative walk: a recursive one would hit Python's own limit before ours.
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            if depth > MAX_VALUE_DEPTH:
                raise _too_deep(what)
            stack.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list):
            if depth > MAX_VALUE_DEPTH:
                raise _too_deep(what)
            stack.extend((child, depth + 1) for child in item)
        elif isinstance(item, bool) or item is None or isinstance(item, str):
            continue
        elif isinstance(item, int):
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


def _too_deep(what: str) -> ValueRejected:
    return ValueRejected(
        ErrorCode.NESTING_TOO_DEEP, f"{what} is nested deeper than {MAX_VALUE_DEPTH} levels"
    )
