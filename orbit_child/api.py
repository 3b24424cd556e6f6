"""The handler API: what a handler module imports from Orbit (docs/handlers.md).

A handler is a ``Handler(handler, handler_version, payload_version, fn)``, or a function
registered for a shared ``TaskType`` with ``Handlers.task``; ``fn`` takes one ``Execution``
and returns a JSON value (None is a null result), or raises ``WorkerFailure`` or an
exception its type declares in ``fails_on`` for an explicit, known failure. Any other
exception is an uncertain outcome (UNKNOWN/HANDLER_ERROR).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from orbit_wire.errors import HandlerSpecError, OutcomeError
from orbit_wire.fails_on import FailsOn
from orbit_wire.model import Capability
from orbit_wire.names import is_code
from orbit_wire.policy import CapabilityPolicy, DeclaredPolicy
from orbit_wire.tasktype import TaskType

__all__ = ["Execution", "Handler", "HandlerFn", "Handlers", "RawJSON", "WorkerFailure",
           "declared_policies"]

HandlerFn = Callable[["Execution"], Any] | Callable[["Execution"], Awaitable[Any]]
F = TypeVar("F", bound=HandlerFn)


NO_POLICY = DeclaredPolicy()


@dataclass(frozen=True, slots=True)
class Handler:
    """One capability and the function that serves it (sync ``def`` or ``async def``), and
    the exceptions it reports as an explicit FAILED (``fails_on``, orbit_wire/fails_on.py)."""

    handler: str
    handler_version: str
    payload_version: str
    fn: HandlerFn
    # What the TaskType declares; the worker registers it with the server (docs/handlers.md).
    policy: DeclaredPolicy = NO_POLICY
    fails_on: FailsOn = ()

    @property
    def capability(self) -> Capability:
        return Capability(self.handler, self.handler_version, self.payload_version)

    @classmethod
    def of(cls, task_type: TaskType[Any, Any], fn: HandlerFn) -> Handler:
        """The Handler serving ``task_type``'s capability with ``fn``, its policy and the
        exceptions it reports as an explicit FAILED."""
        return cls(task_type.handler, task_type.handler_version, task_type.payload_version, fn,
                   task_type.policy, task_type.fails_on)


class Handlers:
    """A registry of handlers, filled with a decorator per shared declaration:

        handlers = Handlers()

        @handlers.task(normalize)          # normalize = TaskType("text.normalize", "v1", "v1")
        def normalise(execution: Execution) -> dict[str, str]: ...

    ``orbit-supervise QUEUE module:handlers`` accepts it (it has a ``handlers`` list). A
    capability registered twice raises HandlerSpecError at import time.
    """

    def __init__(self) -> None:
        self.handlers: list[Handler] = []

    def task(self, task_type: TaskType[Any, Any]) -> Callable[[F], F]:
        """Register the decorated function for ``task_type``; the function is unchanged
        (call it directly in unit tests)."""
        def register(fn: F) -> F:
            self.add(task_type, fn)
            return fn
        return register

    def add(self, task_type: TaskType[Any, Any], fn: HandlerFn) -> Handler:
        """Register ``fn`` for ``task_type`` without a decorator."""
        made = Handler.of(task_type, fn)
        if any(h.capability == made.capability for h in self.handlers):
            raise HandlerSpecError(f"{made.capability} is registered twice")
        self.handlers.append(made)
        return made

    def __iter__(self) -> Iterator[Handler]:
        return iter(self.handlers)

    def __len__(self) -> int:
        return len(self.handlers)


def declared_policies(handlers: Iterable[Handler]) -> tuple[CapabilityPolicy, ...]:
    """The policies ``handlers`` declare, for the worker's hello (none for a handler whose
    TaskType declares nothing)."""
    return tuple(CapabilityPolicy(h.capability, h.policy) for h in handlers
                 if not h.policy.empty)


class WorkerFailure(OutcomeError):
    """An explicit failure: the attempt is reported FAILED with ``code`` and ``details``.

    ``code`` must match ``[A-Z][A-Z0-9_]{0,63}`` (e.g. OBJECT_REJECTED, TEMPORARY_REJECTION);
    ``details`` is a JSON object (``{}`` when omitted); ``retryable`` asks the server to retry
    if the task's policy allows. A code or details that break these rules turn the outcome
    into UNKNOWN/HANDLER_ERROR, because the handler's intent can no longer be trusted. It is
    an ``OrbitError`` of the outcome branch: its code is the handler's own, not an ErrorCode.
    """

    def __init__(self, code: str, details: dict[str, Any] | None = None,
                 retryable: bool = False) -> None:
        # Taken as given: the child checks code, details and retryable when it reports them.
        super().__init__(code, code, retryable=retryable)
        self.details = {} if details is None else details

    @property
    def code_is_valid(self) -> bool:
        return is_code(self.code)


class RawJSON:
    """A result given as exact JSON text, carried unchanged (e.g. ``1.000000000000000000001``).

    The supervisor still validates the text against the result rules.
    """

    __slots__ = ("text",)

    def __init__(self, text: str | bytes) -> None:
        self.text = text.decode() if isinstance(text, bytes) else text


@dataclass(frozen=True, slots=True)
class ParentResult:
    """One parent of a workflow node as its handler sees it (``execution.parents``):
    ``result`` when it SUCCEEDED; ``code`` and ``details`` for a failure the edge lets the
    node run after (``on_failure: "run"``)."""

    key: str
    task_id: str
    state: str
    result: Any = None
    code: str | None = None
    details: Any = None


def parents_of(raw: Any) -> tuple[ParentResult, ...]:
    """The parents a RunTask carries (a list of objects, or None) as ParentResults."""
    if not raw:
        return ()
    return tuple(ParentResult(key=p["key"], task_id=p["task_id"], state=p["state"],
                              result=p.get("result"), code=p.get("code"),
                              details=p.get("details")) for p in raw)


@dataclass(slots=True)
class Execution:
    """What a handler knows about the attempt it runs. No secrets, no worker identity.

    ``deadline_at_ms`` is the task's total deadline in wall-clock milliseconds (informational:
    the supervisor enforces leases and kills the process regardless). ``epoch`` is the
    fencing token to pass to resources that can refuse stale writers; ``task_id`` (not the
    attempt ID) is the idempotency key for effects.
    """

    task_id: str
    attempt_id: str
    epoch: int
    attempt_number: int
    capability: Capability
    payload: Any
    deadline_at_ms: int
    idempotency: str
    # The last progress details of the task's previous attempt that did not succeed (a JSON
    # value), to resume from; None on a first attempt or when that attempt reported none.
    checkpoint: Any = None
    # A workflow node's parents, in the order its edges were declared (empty otherwise).
    parents: tuple[ParentResult, ...] = ()
    _cancel_check: Callable[[], bool] = field(default=lambda: False, repr=False)
    # Where checked progress goes (the child's loop); by default it is only checked.
    _progress_sink: Callable[[float | None, str | None], None] = field(
        default=lambda fraction, details: None, repr=False)

    def cancelled(self) -> bool:
        """True once the supervisor asked this attempt to stop.

        Cooperation is a courtesy: the supervisor SIGKILLs the process when the lease is lost
        whether or not the handler checked. A long loop may call this to stop early.
        """
        return self._cancel_check()

    def progress(self, fraction: float | None = None, details: Any = None) -> None:
        """Report how far the handler got: ``fraction`` done (a number in [0, 1]) and
        ``details``, a JSON value (at most 64 KiB encoded) the next attempt receives as
        ``checkpoint`` if this one does not succeed. None leaves a field as it was; a call
        with neither is a sign of life for the progress timeout. Raises TypeError or
        ValueError at once for a bad argument. Cheap to call often: the child sends at most
        one message per 50 ms, the latest value winning (docs/handlers.md)."""
        # progress.py imports results.py, which imports this module: no import at the top.
        from .progress import check_progress

        checked, text = check_progress(fraction, details)
        self._progress_sink(checked, text)
