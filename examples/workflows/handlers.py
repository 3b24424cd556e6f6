"""Handlers of the workflow example: count the words of each text, then merge the counts.

Two capabilities, ``<prefix>.count`` and ``<prefix>.merge`` (v1, v1). The prefix is
``words`` unless the environment variable ORBIT_EXAMPLE_HANDLER says otherwise: ``python -m
examples.workflows`` sets a fresh one per run, so only its own children serve its tasks.

``count``: payload ``{"text": "a b a"}`` → ``{"a": 2, "b": 1}``.
``merge``: a chord's callback. Its payload says how many words to keep (``{"top": 3}``); the
counts arrive as its parents' results (``execution.parents``, in the order declared), so
the merge never reads another task itself.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

from orbit_child import Execution, Handlers, TaskType, WorkerFailure

HANDLER_ENV = "ORBIT_EXAMPLE_HANDLER"
PREFIX = os.environ.get(HANDLER_ENV) or "words"
Counts = dict[str, int]


def count_type(prefix: str = PREFIX) -> TaskType[dict[str, str], Counts]:
    """Counting has no side effect: an uncertain attempt may simply run again."""
    return TaskType(f"{prefix}.count", "v1", "v1", idempotent=True, attempt_timeout_ms=30_000,
                    max_attempts=3)


def merge_type(prefix: str = PREFIX) -> TaskType[dict[str, int], dict[str, Any]]:
    return TaskType(f"{prefix}.merge", "v1", "v1", idempotent=True, attempt_timeout_ms=30_000,
                    max_attempts=3)


HANDLERS = Handlers()


def count_words(text: str) -> Counts:
    return dict(Counter(text.lower().split()))


@HANDLERS.task(count_type())
def count(execution: Execution) -> Counts:
    payload = execution.payload
    if not isinstance(payload, dict) or not isinstance(payload.get("text"), str):
        raise WorkerFailure("OBJECT_REJECTED", {"reason": "payload must be {\"text\": string}"})
    return count_words(payload["text"])


@HANDLERS.task(merge_type())
def merge(execution: Execution) -> dict[str, Any]:
    total: Counter[str] = Counter()
    for parent in execution.parents:  # each member's counts, in the order declared
        total.update(parent.result)
    top = int((execution.payload or {}).get("top", 3))
    ranked = sorted(total.items(), key=lambda item: (-item[1], item[0]))[:top]
    return {"texts": len(execution.parents), "words": sum(total.values()),
            "top": [[word, n] for word, n in ranked]}
