"""The only Orbit code a handler process imports: the handler API (docs/handlers.md).

    from orbit_child import Handler, Execution, WorkerFailure

    def normalise(execution: Execution) -> dict:
        return {"text": execution.payload["text"].upper()}

    handlers = [Handler("normalise", "1", "1", normalise)]
"""

from .api import Execution, Handler, RawJSON, WorkerFailure

__all__ = ["Execution", "Handler", "RawJSON", "WorkerFailure"]
