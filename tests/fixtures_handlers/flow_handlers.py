"""Handlers for the pause and bulk-action tests: the supervisor's own, and two versions of
one capability (``flow.work`` v1 and v2) so a version's pause can leave the other running."""

from __future__ import annotations

from typing import Any

from supervisor_handlers import HANDLERS as SUPERVISOR_HANDLERS

from orbit_child import Execution, Handler


def work(execution: Execution) -> Any:
    return {"worked": execution.payload.get("n")}


HANDLERS = [
    *SUPERVISOR_HANDLERS,
    Handler("flow.work", "v1", "v1", work),
    Handler("flow.work", "v2", "v1", work),
]
