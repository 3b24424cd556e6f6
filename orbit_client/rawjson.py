"""Exact text of a top-level member of a JSON object, without re-encoding it.

The server returns a task's ``result`` exactly as the handler produced it. Parsing with orjson
keeps every integer exact (signed 64-bit is the wire limit) but turns other numbers into
floats, so ``1.10`` would come back as ``1.1``. ``member_text`` slices the original bytes
instead, so a caller that needs the handler's own number text can have it.

Pure: no I/O. The input must already be valid JSON (call it after orjson parsed the body);
on anything unexpected it returns None rather than guessing.
"""

from __future__ import annotations

_WS = b" \t\r\n"


def member_text(body: bytes, key: str) -> bytes | None:
    """Return the raw value text of ``key`` in the top-level JSON object ``body``.

    None when the body is not an object, the key is absent, or the text cannot be scanned.
    When the key occurs more than once the last one wins, as it does for orjson.
    """
    want = key.encode()
    n = len(body)
    i = _skip_ws(body, 0)
    if i >= n or body[i] != ord("{"):
        return None
    i = _skip_ws(body, i + 1)
    found: bytes | None = None
    if i < n and body[i] == ord("}"):
        return None
    while i < n:
        if body[i] != ord('"'):
            return None
        key_end = _skip_string(body, i)
        if key_end < 0:
            return None
        raw_key = body[i + 1 : key_end - 1]
        i = _skip_ws(body, key_end)
        if i >= n or body[i] != ord(":"):
            return None
        start = _skip_ws(body, i + 1)
        end = _skip_value(body, start)
        if end < 0:
            return None
        # Keys with escapes are compared as written; the server never escapes plain names.
        if raw_key == want:
            found = body[start:end]
        i = _skip_ws(body, end)
        if i < n and body[i] == ord(","):
            i = _skip_ws(body, i + 1)
            continue
        if i < n and body[i] == ord("}"):
            return found
        return None
    return None


def _skip_ws(body: bytes, i: int) -> int:
    n = len(body)
    while i < n and body[i] in _WS:
        i += 1
    return i


def _skip_string(body: bytes, i: int) -> int:
    """``body[i]`` is an opening quote; return the index after the closing one, or -1."""
    i += 1
    while True:
        quote = body.find(b'"', i)
        if quote < 0:
            return -1
        # The quote closes the string unless an odd run of backslashes escapes it.
        slashes = 0
        while body[quote - 1 - slashes] == 0x5C:
            slashes += 1
        if slashes % 2 == 0:
            return quote + 1
        i = quote + 1


def _skip_value(body: bytes, i: int) -> int:
    """Return the index just after the JSON value starting at ``i``, or -1."""
    n = len(body)
    if i >= n:
        return -1
    c = body[i]
    if c == 0x22:
        return _skip_string(body, i)
    if c in b"[{":
        depth = 0
        while i < n:
            c = body[i]
            if c == 0x22:
                i = _skip_string(body, i)
                if i < 0:
                    return -1
                continue
            if c in b"[{":
                depth += 1
            elif c in b"]}":
                depth -= 1
                if depth == 0:
                    return i + 1
            i += 1
        return -1
    # A scalar: number, true, false or null runs until a delimiter.
    start = i
    while i < n and body[i] not in b",}] \t\r\n":
        i += 1
    return i if i > start else -1
