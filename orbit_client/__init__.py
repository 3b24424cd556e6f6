"""Orbit client: the HTTP API for producers and operators, and the ``orbit`` command
(docs/producers.md).

    from orbit_client import OrbitClient, TaskType
    normalize = TaskType("text.normalize", "v1", "v1")   # shared with the worker
    with OrbitClient(credentials="producer.json") as orbit:
        task = orbit.submit(normalize, {"text": "hi"}, idempotent=True, delay_ms=1000)
        print(orbit.result(task, timeout=30))          # or TaskFailed, TaskTimeout, ...
        flow = orbit.submit(chain(normalize.s({"text": "a"}), count.s({})))  # a Workflow
        print(flow.result(timeout=60))                 # docs/workflows.md

The dict API stays: ``orbit.submit(queue_id, spec_dict)``, ``orbit.wait(task_id, timeout)``.
``orbit.wait(tasks, timeout)`` and ``orbit.as_completed(tasks, timeout)`` wait for several.
Submits and waits ride the producer channel (one WebSocket) when the server offers it.
"""

from orbit_host.credentials import (
    Credentials,
    CredentialsFileError,
    load_credentials,
    write_credentials,
)
from orbit_wire.fails_on import Retryable
from orbit_wire.tasktype import TaskType

from .async_client import AsyncOrbitClient
from .canvas import Chain, Chord, Graph, Group, chain, chord, group
from .client import OrbitClient, is_settled
from .errors import CertificateError, OrbitApiError, ServerUnreachable
from .tasks import (
    Task,
    TaskCancelled,
    TaskError,
    TaskFailed,
    TaskNeedsReview,
    TaskTimeout,
)
from .workflow_handle import AsyncWorkflow, Workflow
from .workflows import (
    WorkflowBlocked,
    WorkflowCancelled,
    WorkflowError,
    WorkflowFailed,
    WorkflowNode,
    WorkflowTimeout,
    WorkflowView,
)

__all__ = [
    "AsyncOrbitClient",
    "AsyncWorkflow",
    "CertificateError",
    "Chain",
    "Chord",
    "Credentials",
    "CredentialsFileError",
    "Graph",
    "Group",
    "OrbitApiError",
    "OrbitClient",
    "Retryable",
    "ServerUnreachable",
    "Task",
    "TaskCancelled",
    "TaskError",
    "TaskFailed",
    "TaskNeedsReview",
    "TaskTimeout",
    "TaskType",
    "Workflow",
    "WorkflowBlocked",
    "WorkflowCancelled",
    "WorkflowError",
    "WorkflowFailed",
    "WorkflowNode",
    "WorkflowTimeout",
    "WorkflowView",
    "chain",
    "chord",
    "group",
    "is_settled",
    "load_credentials",
    "write_credentials",
]
