"""Flow-control keys and limit patterns (docs/flow-control.md), checked alike by the client,
the server's TaskSpec and its limit routes. A key is ``name:value`` (``licence:matlab``,
``customer:42``); a task carries at most MAX_LIMIT_KEYS of them. A limit's pattern is a key,
or ``name:*``: every key of that name gets its own limit of that size. Pure.
"""

from __future__ import annotations

import re
from typing import Annotated, Final

from msgspec import Meta

from .errors import ErrorCode, OrbitError
from .names import whole

__all__ = ["KEY_NAME_RE", "KEY_RE", "MAX_LIMIT_KEYS", "PATTERN_RE", "LimitKey", "LimitKeys",
           "check_keys", "check_pattern", "parse_rate", "pattern_matches"]

MAX_LIMIT_KEYS: Final = 8
MAX_KEY_NAME_LEN: Final = 32
MAX_KEY_VALUE_LEN: Final = 64
_NAME = rf"[a-z][a-z0-9_.-]{{0,{MAX_KEY_NAME_LEN - 1}}}"
_VALUE = rf"[A-Za-z0-9_.@+=-]{{1,{MAX_KEY_VALUE_LEN}}}"  # no "/": a pattern is a path segment
KEY_RE: Final = re.compile(rf"{_NAME}:{_VALUE}")
KEY_NAME_RE: Final = re.compile(_NAME)
PATTERN_RE: Final = re.compile(rf"{_NAME}:(?:{_VALUE}|\*)")
_KEY_FORM = (f"name:value (name 1-{MAX_KEY_NAME_LEN} of [a-z0-9_.-] starting with a letter, "
             f"value 1-{MAX_KEY_VALUE_LEN} of [A-Za-z0-9_.@+=-])")
_KEY_RULE = f"must be {_KEY_FORM}"
# The longest rate interval, and the most starts one may allow.
MAX_RATE_INTERVAL_MS: Final = 86_400_000
MAX_RATE_COUNT: Final = 100_000
MAX_RUNNING: Final = 1_000_000

LimitKey = Annotated[str, Meta(pattern=whole(KEY_RE.pattern), extra={"message": _KEY_RULE})]
LimitKeys = Annotated[list[LimitKey], Meta(
    max_length=MAX_LIMIT_KEYS,
    description=f"flow-control keys (at most {MAX_LIMIT_KEYS}, each name:value): the queue's "
    "limits that match one hold the task while they are full")]


def check_keys(keys: object, where: str = "limits") -> tuple[str, ...]:
    """The keys, deduplicated in order; BAD_REQUEST naming the rule otherwise."""
    if not isinstance(keys, (list, tuple)):
        raise OrbitError(ErrorCode.BAD_REQUEST, f"{where} must be a list of keys")
    if len(keys) > MAX_LIMIT_KEYS:
        raise OrbitError(ErrorCode.BAD_REQUEST,
                         f"{where} holds {len(keys)} keys: at most {MAX_LIMIT_KEYS}")
    for key in keys:
        if not isinstance(key, str) or KEY_RE.fullmatch(key) is None:
            raise OrbitError(ErrorCode.BAD_REQUEST, f"{where}: {key!r} {_KEY_RULE}")
    return tuple(dict.fromkeys(keys))


def check_pattern(pattern: object) -> str:
    """A limit's pattern: a key or ``name:*``; BAD_REQUEST otherwise."""
    if not isinstance(pattern, str) or PATTERN_RE.fullmatch(pattern) is None:
        raise OrbitError(ErrorCode.BAD_REQUEST,
                         f"limit pattern {pattern!r} must be {_KEY_FORM} or name:*")
    return pattern


def pattern_matches(pattern: str, key: str) -> bool:
    """Whether ``key`` falls under ``pattern`` (itself, or every key of the name for
    ``name:*``)."""
    if pattern.endswith(":*"):
        return key.startswith(pattern[:-1])
    return key == pattern


_RATE_RE = re.compile(r"([0-9]{1,6})/([0-9]{0,6})(ms|s|m|h)")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}


def parse_rate(text: str) -> tuple[int, int]:
    """``N/<interval>`` (``10/1s``, ``100/m``, ``5/500ms``) as (count, interval_ms);
    BAD_REQUEST when malformed or out of range."""
    match = _RATE_RE.fullmatch(text.strip())
    if match is None:
        raise OrbitError(ErrorCode.BAD_REQUEST,
                         f"rate {text!r} must be N/<interval>, e.g. 10/1s, 100/m, 5/500ms")
    count = int(match.group(1))
    interval = int(match.group(2) or "1") * _UNIT_MS[match.group(3)]
    if not 1 <= count <= MAX_RATE_COUNT or not 1 <= interval <= MAX_RATE_INTERVAL_MS:
        raise OrbitError(ErrorCode.BAD_REQUEST,
                         f"rate {text!r}: 1-{MAX_RATE_COUNT} starts per 1 ms-24 h")
    return count, interval
