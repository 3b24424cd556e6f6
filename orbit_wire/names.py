"""The forms of the names every party checks: capability names, codes and message IDs."""

from __future__ import annotations

import re
from typing import TypeGuard

from .limits import MAX_CODE_LEN, MAX_MESSAGE_ID_LEN, MAX_NAME_LEN

# Handler names and versions (the capability triple), queue and credential names excluded.
NAME_RE = re.compile(rf"[A-Za-z0-9._:/-]{{1,{MAX_NAME_LEN}}}")
# WorkerFailure codes, outcome codes and kill reasons: UPPER_SNAKE_CASE.
CODE_RE = re.compile(rf"[A-Z][A-Z0-9_]{{0,{MAX_CODE_LEN - 1}}}")
MSG_ID_RE = re.compile(rf"[A-Za-z0-9._:-]{{1,{MAX_MESSAGE_ID_LEN}}}")
NAME_CHARS = "[A-Za-z0-9._:/-]"


def is_name(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and NAME_RE.fullmatch(value) is not None


def is_code(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and CODE_RE.fullmatch(value) is not None

# A handler exception's type name as the child reports it (``KeyError``, ``pkg.mod.Error``).
EXCEPTION_TYPE_MAX = 128
EXCEPTION_TYPE_RE = re.compile(rf"[A-Za-z_][A-Za-z0-9_.<>]{{0,{EXCEPTION_TYPE_MAX - 1}}}")
