"""Turning a handler's return value or WorkerFailure into JSON text, in the child.

orjson silently writes NaN and infinities as ``null``, so non-finite numbers are rejected
before encoding. Everything else (integer range, nesting, null, size) is checked again by the
supervisor on the exact text with ``orbit_wire.jsonvalue.check_text``; the child only makes
sure what it sends is the handler's value, unchanged, and small enough to frame.
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

import orjson

from orbit_wire.errors import ErrorCode, ValueRejected
from orbit_wire.jsonvalue import walk_json
from orbit_wire.limits import MAX_VALUE_BYTES

from .api import RawJSON

__all__ = ["encode_json_value"]


def encode_json_value(value: Any, *, what: str = "result") -> str:
    """The JSON text of ``value``; raises ValueRejected when it cannot be carried as is.

    ``RawJSON`` text is passed through untouched; ``Decimal`` keeps its exact digits.
    """
    if isinstance(value, RawJSON):
        text = value.text
    else:
        _reject_non_finite(value, what)
        try:
            text = orjson.dumps(value, default=_default).decode()
        except TypeError as exc:  # orjson.JSONEncodeError is a TypeError
            too_wide = "Integer" in str(exc)
            code = ErrorCode.NUMBER_OUT_OF_RANGE if too_wide else ErrorCode.INVALID_JSON
            raise ValueRejected(code, f"{what} cannot be encoded as JSON: {exc}") from None
    size = len(text.encode())
    if size > MAX_VALUE_BYTES:
        raise ValueRejected(
            ErrorCode.PAYLOAD_TOO_LARGE, f"{what} is {size} bytes; at most {MAX_VALUE_BYTES}"
        )
    return text


def _default(obj: Any) -> Any:
    if isinstance(obj, Decimal):
        return orjson.Fragment(str(obj))
    if isinstance(obj, RawJSON):
        return orjson.Fragment(obj.text)
    raise TypeError(f"Type is not JSON serializable: {type(obj).__name__}")


def _reject_non_finite(value: Any, what: str) -> None:
    # Depth-bounded, so a cyclic or absurdly deep value cannot hang the child.
    def finite(item: Any) -> None:
        if (isinstance(item, float) and not math.isfinite(item)) or (
            isinstance(item, Decimal) and not item.is_finite()
        ):
            raise ValueRejected(ErrorCode.NUMBER_OUT_OF_RANGE, f"{what} has a non-finite number")

    walk_json(value, what=what, containers=(dict, list, tuple), leaf=finite)
