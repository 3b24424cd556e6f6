"""A worker's labels (``orbit-supervise --label gpu=a100``: what its host offers) and what a
task ``requires`` of them: each a small map of label names to values, one rule for both.
A task is reserved only for a worker whose labels include every pair it requires.

``requires_text`` is the canonical form a task row keeps ("k=v,k=v", keys sorted; neither
character may appear in a label), ``requires_key`` its short digest, the column the
dispatch index holds (the text itself may be too long for an index entry). Pure.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Final

from msgspec import Meta

from .errors import ErrorCode, OrbitError
from .limits import MAX_LABEL_LEN, MAX_LABELS
from .names import whole

__all__ = ["LabelText", "Labels", "Requires", "labels_match", "parse_label",
           "parse_labels", "requires_from_text", "requires_key", "requires_text"]

LABEL_CHARS: Final = "[A-Za-z0-9][A-Za-z0-9_.:/-]*"
LabelText = Annotated[str, Meta(
    min_length=1, max_length=MAX_LABEL_LEN, pattern=whole(LABEL_CHARS),
    extra={"message": f"must be 1-{MAX_LABEL_LEN} of [A-Za-z0-9_.:/-], starting with a "
           "letter or digit"})]
# A worker's labels (``orbit-supervise --label gpu=a100``): what its host offers.
Labels = Annotated[dict[LabelText, LabelText], Meta(max_length=MAX_LABELS)]
# What a task requires of its worker's labels (empty: nothing).
Requires = Annotated[dict[LabelText, LabelText], Meta(
    max_length=MAX_LABELS, description="label pairs the worker must have (orbit-supervise "
    "--label); a task is reserved only for a worker whose labels include all of them")]
_KEY_LEN: Final = 32  # hex characters of the digest
_LABEL_RE: Final = re.compile(LABEL_CHARS)
_RULE: Final = (f"1-{MAX_LABEL_LEN} characters of [A-Za-z0-9_.:/-], starting with a letter "
                "or digit")


def parse_label(text: str) -> tuple[str, str]:
    """``"gpu=a100"`` as ``("gpu", "a100")``; OrbitError BAD_REQUEST otherwise."""
    name, sep, value = text.partition("=")
    if not sep:
        raise OrbitError(ErrorCode.BAD_REQUEST, f"label {text!r} must be NAME=VALUE")
    for part, what in ((name, "name"), (value, "value")):
        if len(part) > MAX_LABEL_LEN or not _LABEL_RE.fullmatch(part):
            raise OrbitError(ErrorCode.BAD_REQUEST,
                             f"label {text!r}: its {what} must be {_RULE}")
    return name, value


def parse_labels(texts: Iterable[str]) -> dict[str, str]:
    """Several ``NAME=VALUE`` texts as one map; a name given twice is BAD_REQUEST."""
    out: dict[str, str] = {}
    for text in texts:
        name, value = parse_label(text)
        if name in out:
            raise OrbitError(ErrorCode.BAD_REQUEST, f"label {name!r} is given twice")
        out[name] = value
    if len(out) > MAX_LABELS:
        raise OrbitError(ErrorCode.BAD_REQUEST, f"at most {MAX_LABELS} labels")
    return out


def requires_text(requires: Mapping[str, str] | None) -> str | None:
    """The canonical text of a requirement ("k=v,k=v", keys sorted); None for nothing."""
    if not requires:
        return None
    return ",".join(f"{k}={requires[k]}" for k in sorted(requires))


def requires_key(text: str | None) -> str | None:
    """The dispatch index's key for a canonical requirement text (None for nothing)."""
    if text is None:
        return None
    return hashlib.sha256(text.encode()).hexdigest()[:_KEY_LEN]


def requires_from_text(text: str | None) -> dict[str, str]:
    """The map a canonical text stands for ({} for None)."""
    if not text:
        return {}
    return dict(pair.split("=", 1) for pair in text.split(","))


def labels_match(labels: Mapping[str, Any], requires: Mapping[str, str]) -> bool:
    """Whether ``labels`` include every pair of ``requires``."""
    return all(labels.get(k) == v for k, v in requires.items())
