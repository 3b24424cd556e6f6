"""Turning a handler's return value or WorkerFailure into JSON text, in the child.

orjson silently writes NaN and infinities as ``null``, so non-finite numbers are rejected
before encoding; the text is then checked against every value rule (integer range, nesting,
size) with ``orbit_wire.jsonvalue.check_text``, on the exact text that is sent; null is a
value (a handler that returns None succeeded). This is the one check on the worker's side:
the supervisor passes the text on as it came (bounding only its size), and the server
applies the rules again to whatever a worker reports.
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

import orjson

from orbit_wire.errors import ErrorCode, ValueRejected
from orbit_wire.jsonvalue import check_text, walk_json

from .api import RawJSON

__all__ = ["encode_json_value"]


def encode_json_value(value: Any, *, what: str = "result") -> str:
    """The JSON text of ``value``; raises ValueRejected when it breaks a value rule or cannot
    be carried as is.

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
    check_text(text, what=what, allow_null=True)
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
