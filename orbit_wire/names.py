"""The forms of the names every party checks: capability names, codes, message IDs and IDs,
as regular expressions and as msgspec field types that carry them (``Meta`` beside the
type, so a decoder checks them in its one pass and a JSON Schema shows them)."""

from __future__ import annotations

import re
from typing import Annotated, TypeGuard

from msgspec import Meta

from .limits import MAX_CODE_LEN, MAX_MESSAGE_ID_LEN, MAX_NAME_LEN

NAME_CHARS = "[A-Za-z0-9._:/-]"
# Handler names and versions (the capability triple), queue and credential names excluded.
NAME_RE = re.compile(rf"{NAME_CHARS}{{1,{MAX_NAME_LEN}}}")
# WorkerFailure codes, outcome codes and kill reasons: UPPER_SNAKE_CASE.
CODE_RE = re.compile(rf"[A-Z][A-Z0-9_]{{0,{MAX_CODE_LEN - 1}}}")
MSG_ID_RE = re.compile(rf"[A-Za-z0-9._:-]{{1,{MAX_MESSAGE_ID_LEN}}}")
ID_RE = re.compile("[0-9a-f]{32}")


def whole(pattern: str) -> str:
    """``pattern`` as a match of the whole string, read alike by msgspec (Python's
    ``re.search``) and by JSON Schema (ECMA): anchored at both ends, and ``(?!\\n)`` because
    Python's ``$`` also matches before a final newline (ECMA's does not)."""
    return f"^{f'(?:{pattern})' if '|' in pattern else pattern}$(?!\\n)"


# A field type a message names as "<field> <message>" when a value breaks it.
Name = Annotated[str, Meta(min_length=1, max_length=MAX_NAME_LEN,
                           pattern=whole(f"{NAME_CHARS}+"),
                           extra={"message": f"is required: 1-{MAX_NAME_LEN} of {NAME_CHARS}"})]
Code = Annotated[str, Meta(pattern=whole(CODE_RE.pattern), extra={
    "message": f"must be 1-{MAX_CODE_LEN} of [A-Z0-9_], starting with a letter"})]
MsgId = Annotated[str, Meta(pattern=whole(MSG_ID_RE.pattern), extra={
    "message": f"must be 1-{MAX_MESSAGE_ID_LEN} of [A-Za-z0-9._:-]"})]
Id = Annotated[str, Meta(pattern=whole(ID_RE.pattern), extra={
    "message": "must be a 32-character lowercase hex ID"})]


def is_name(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and NAME_RE.fullmatch(value) is not None


def is_code(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and CODE_RE.fullmatch(value) is not None

# A handler exception's qualified type name as the child reports it (``builtins.KeyError``,
# ``pkg.mod.Error``).
EXCEPTION_TYPE_MAX = 128
EXCEPTION_TYPE_RE = re.compile(rf"[A-Za-z_][A-Za-z0-9_.<>]{{0,{EXCEPTION_TYPE_MAX - 1}}}")
# The first line of an exception's message, recorded only where the worker's operator opted
# in (orbit-supervise --report-exception-messages): at most this many UTF-8 bytes.
EXCEPTION_MESSAGE_MAX_BYTES = 1024


def message_first_line(text: str) -> str | None:
    """The first non-blank line of an exception's message, cut to EXCEPTION_MESSAGE_MAX_BYTES
    of UTF-8 (never inside a character); None when there is none."""
    lines = text.strip().splitlines()
    if not lines:
        return None
    cut = lines[0].encode("utf-8", "replace")[:EXCEPTION_MESSAGE_MAX_BYTES]
    return cut.decode("utf-8", "ignore").strip() or None
