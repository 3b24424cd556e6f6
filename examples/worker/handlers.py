"""Handlers of the example worker: a real text normalisation.

``HANDLERS`` serves one capability, ``(<name>, v1, v1)``. The name is ``text.normalize``
unless the environment variable ORBIT_EXAMPLE_HANDLER says otherwise: ``python -m
examples.worker`` sets a fresh name per run, so its tasks can only be served by its own
children (never by another worker on the same queue) and its children never pick up tasks
left over from an earlier run. The supervisor's children inherit the variable, and this
module is imported once per child, so every child serves the same name.

Payload ``{"text": "  hello   orbit "}`` → result ``{"text": "HELLO ORBIT"}``.

``normalize_type`` is the one declaration the producer (``__main__``) and this worker share;
the function is registered for it with ``@HANDLERS.task``.
"""

from __future__ import annotations

import os
from typing import Any

from orbit_child import Execution, Handlers, TaskType, WorkerFailure

HANDLER_ENV = "ORBIT_EXAMPLE_HANDLER"
DEFAULT_HANDLER = "text.normalize"
VERSION = "v1"
Text = dict[str, str]


def normalize_type(name: str = DEFAULT_HANDLER) -> TaskType[Text, Text]:
    """The capability (name, v1, v1) and its policy, declared once for every submit (the
    worker registers it with the server, so a CLI submit gets it too). Normalising text has
    no side effect, so an uncertain attempt may simply run again (idempotent); it takes
    milliseconds, so an attempt still running after 30 s is stuck and is killed."""
    return TaskType(name, VERSION, VERSION, idempotent=True, attempt_timeout_ms=30_000,
                    max_attempts=3)


HANDLER_NAME = os.environ.get(HANDLER_ENV) or DEFAULT_HANDLER
NORMALIZE = normalize_type(HANDLER_NAME)
HANDLERS = Handlers()


def normalize_text(text: str) -> str:
    """Strip, collapse every run of whitespace to one space, uppercase."""
    return " ".join(text.split()).upper()


@HANDLERS.task(NORMALIZE)
def normalize(execution: Execution) -> dict[str, Any]:
    payload = execution.payload
    if not isinstance(payload, dict) or not isinstance(payload.get("text"), str):
        # A malformed payload will not get better on retry: fail explicitly, no retry.
        raise WorkerFailure("OBJECT_REJECTED", {"reason": "payload must be {\"text\": string}"})
    return {"text": normalize_text(payload["text"])}

