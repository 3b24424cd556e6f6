"""Handlers for workers chosen by labels (docs/supervisor.md, "Labels"): ``labels.echo``
requires nothing of its worker; ``labels.gpu`` declares ``requires={"gpu": "a100"}`` on its
TaskType, so every task of it needs a worker started with ``--label gpu=a100``."""

from __future__ import annotations

from typing import Any

from orbit_child import Execution, Handlers
from orbit_wire import TaskType

ECHO = TaskType("labels.echo", "v1", "v1")
GPU = TaskType("labels.gpu", "v1", "v1", requires={"gpu": "a100"})


def echo(execution: Execution) -> Any:
    return {"n": execution.payload.get("n")}


handlers = Handlers()
handlers.add(ECHO, echo)
handlers.add(GPU, echo)
HANDLERS = handlers.handlers
