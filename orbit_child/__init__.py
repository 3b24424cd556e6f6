"""The only Orbit code a handler process imports: the handler API (docs/handlers.md).

    from orbit_child import Execution, Handlers, TaskType, WorkerFailure

    normalize = TaskType("text.normalize", "v1", "v1")   # shared with the producer
    handlers = Handlers()

    @handlers.task(normalize)
    def normalise(execution: Execution) -> dict:
        return {"text": execution.payload["text"].upper()}

``TaskType`` is orbit_wire's, re-exported so a handler module needs one import.
"""

from orbit_wire.fails_on import Retryable
from orbit_wire.tasktype import TaskType

from .api import Execution, Handler, Handlers, ParentResult, RawJSON, WorkerFailure

__all__ = ["Execution", "Handler", "Handlers", "ParentResult", "RawJSON", "Retryable",
           "TaskType", "WorkerFailure"]
