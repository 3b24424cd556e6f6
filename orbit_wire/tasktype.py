"""``TaskType``: one declaration of a capability and its policy, shared by the producer and
the worker.

    # app/tasks.py, imported by both sides
    from orbit_wire import TaskType
    normalize: TaskType[dict[str, str], dict[str, str]] = TaskType(
        "text.normalize", "v1", "v1", idempotent=True, attempt_timeout_ms=30_000)

The worker registers a function for it (``orbit_child.Handlers.task``) and declares its
policy to the server in ``hello``, which fills every field a submit leaves out from it (the
CLI's, a schedule's, any client's); the producer submits with it
(``orbit_client.OrbitClient.submit``), sending what it declares. The two type parameters
(payload, result) are for static checkers only; nothing is validated against them at run
time. It lives in orbit_wire because both orbit_client and orbit_child may import it. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from .errors import ErrorCode, OrbitError
from .fails_on import FailsOn, check_fails_on
from .limits import MAX_DELAY_MS, MAX_NAME_LEN, MAX_PRIORITY, MIN_PRIORITY
from .model import Capability, Idempotency
from .names import is_name
from .policy import Backoff, DeclaredPolicy, declared_policy

__all__ = ["Signature", "TaskType"]

P = TypeVar("P")  # the payload
R = TypeVar("R")  # the result

# Policy fields a submit may set besides the payload (docs/http-api.md "TaskSpec").
_POLICY_FIELDS = frozenset({"max_attempts", "backoff", "attempt_timeout_ms", "deadline_ms",
                            "lease_ttl_ms", "schedule_to_start_ms", "cancel_grace_ms",
                            "progress_timeout_ms", "requires", "limits"})


@dataclass(frozen=True, slots=True)
class TaskType(Generic[P, R]):
    """A capability (handler, handler_version, payload_version) and its declared policy.

    The policy is a property of the work, so it is declared here once: every field a submit
    may set (docs/http-api.md "TaskSpec"), None meaning not declared (the server's default
    then). ``attempt_timeout_ms`` is the capability's time limit: an attempt running longer
    loses its lease and its child is killed. ``backoff`` is a ``orbit_wire.policy.Backoff``
    or a dict of its fields. A submit may still set any field for one task. Raises OrbitError
    BAD_REQUEST for a name that breaks the capability rule or a field that breaks its bound.
    ``fails_on``: the exception types the worker reports as an explicit FAILED, each
    ``Retryable(type)`` or not (orbit_wire/fails_on.py); a bad one is BAD_REQUEST too.
    """

    handler: str
    handler_version: str
    payload_version: str
    idempotent: bool | None = None
    priority: int | None = None
    max_attempts: int | None = None
    backoff: Backoff | dict[str, Any] | None = None
    attempt_timeout_ms: int | None = None
    deadline_ms: int | None = None
    lease_ttl_ms: int | None = None
    schedule_to_start_ms: int | None = None
    cancel_grace_ms: int | None = None
    # An attempt that reports no progress (``execution.progress``) for this long is killed
    # with reason PROGRESS_TIMEOUT; None: no bound.
    progress_timeout_ms: int | None = None
    # Label pairs a worker must have (``orbit-supervise --label``), e.g. {"gpu": "a100"};
    # kept as sorted pairs so the TaskType stays hashable.
    requires: Mapping[str, str] | tuple[tuple[str, str], ...] | None = None
    # Flow-control keys every task of the type carries (docs/flow-control.md).
    limits: tuple[str, ...] | list[str] | None = None
    fails_on: FailsOn = ()
    # The policy fields above (not fails_on: the worker applies it), checked and encoded once.
    policy: DeclaredPolicy = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "fails_on", check_fails_on(self.fails_on))
        for name in ("handler", "handler_version", "payload_version"):
            if not is_name(getattr(self, name)):
                raise OrbitError(ErrorCode.BAD_REQUEST,
                                 f"TaskType {name} must be 1-{MAX_NAME_LEN} characters of "
                                 "[A-Za-z0-9._:/-]")
        _check_priority(self.priority)
        if self.idempotent is not None and not isinstance(self.idempotent, bool):
            raise OrbitError(ErrorCode.BAD_REQUEST, "TaskType: idempotent must be a bool")
        idempotency = None if self.idempotent is None else (
            Idempotency.IDEMPOTENT if self.idempotent else Idempotency.NON_IDEMPOTENT)
        policy = declared_policy({
            "idempotency": idempotency, "priority": self.priority,
            "max_attempts": self.max_attempts, "backoff": self.backoff,
            "attempt_timeout_ms": self.attempt_timeout_ms, "deadline_ms": self.deadline_ms,
            "lease_ttl_ms": self.lease_ttl_ms, "schedule_to_start_ms": self.schedule_to_start_ms,
            "cancel_grace_ms": self.cancel_grace_ms,
            "progress_timeout_ms": self.progress_timeout_ms,
            "requires": None if self.requires is None else dict(self.requires),
            "limits": None if self.limits is None else tuple(self.limits)},
            f"TaskType {self.capability}")
        object.__setattr__(self, "policy", policy)
        object.__setattr__(self, "backoff", policy.backoff)  # a dict as its (hashable) Struct
        object.__setattr__(self, "requires", None if policy.requires is None
                           else tuple(sorted(policy.requires.items())))

    @property
    def capability(self) -> Capability:
        return Capability(self.handler, self.handler_version, self.payload_version)

    def spec(self, payload: P, *, idempotent: bool | None = None,
             operation_key: str | None = None, priority: int | None = None,
             delay_ms: int | None = None, not_before_at_ms: int | None = None,
             **policy: Any) -> dict[str, Any]:
        """The TaskSpec dict for one submit: the declared policy, then what this call sets.
        ``policy`` takes the other TaskSpec fields (max_attempts, backoff,
        attempt_timeout_ms, deadline_ms, lease_ttl_ms, schedule_to_start_ms,
        cancel_grace_ms, progress_timeout_ms, requires); an unknown one is BAD_REQUEST here
        rather than at the server."""
        unknown = sorted(set(policy) - _POLICY_FIELDS)
        if unknown:
            raise OrbitError(ErrorCode.BAD_REQUEST,
                             f"unknown task field(s): {', '.join(unknown)}")
        if delay_ms is not None and not_before_at_ms is not None:
            raise OrbitError(ErrorCode.BAD_REQUEST,
                             "give delay_ms or not_before_at_ms, not both")
        if delay_ms is not None and not (isinstance(delay_ms, int) and
                                         0 <= delay_ms <= MAX_DELAY_MS):
            raise OrbitError(ErrorCode.BAD_REQUEST,
                             f"delay_ms must be an integer in [0, {MAX_DELAY_MS}]")
        _check_priority(priority)
        spec: dict[str, Any] = {
            **self.capability.to_dict(), "payload": payload, **self.policy.declared()}
        if idempotent is not None:
            spec["idempotency"] = (Idempotency.IDEMPOTENT if idempotent
                                   else Idempotency.NON_IDEMPOTENT).value
        if isinstance(policy.get("backoff"), Backoff):
            policy["backoff"] = policy["backoff"].to_dict()
        extra: Mapping[str, Any] = {
            "operation_key": operation_key, "priority": priority, "delay_ms": delay_ms,
            "not_before_at_ms": not_before_at_ms, **policy,
        }
        spec.update({k: v for k, v in extra.items() if v is not None})
        return spec

    def s(self, payload: P, **options: Any) -> Signature[P, R]:
        """A signature: this type, a payload and a submit's options (``spec``'s), to place
        in a workflow (``orbit_client.chain``, ``group``, ``chord``, ``Graph``). The options
        are checked now, as ``spec`` checks them."""
        self.spec(payload, **options)
        return Signature(self, payload, dict(options))

    def __str__(self) -> str:
        return str(self.capability)


@dataclass(frozen=True, slots=True, eq=False)
class Signature(Generic[P, R]):
    """One task of a workflow not yet submitted: ``TaskType.s(payload, **options)``."""

    task_type: TaskType[P, R]
    payload: P
    options: Mapping[str, Any]

    def spec(self) -> dict[str, Any]:
        """The TaskSpec dict this signature submits."""
        return self.task_type.spec(self.payload, **self.options)

    def __repr__(self) -> str:
        return f"{self.task_type.handler}.s(...)"


def _check_priority(priority: object) -> None:
    if priority is None:
        return
    if (isinstance(priority, bool) or not isinstance(priority, int)
            or not MIN_PRIORITY <= priority <= MAX_PRIORITY):
        raise OrbitError(ErrorCode.BAD_REQUEST,
                         f"priority must be an integer in [{MIN_PRIORITY}, {MAX_PRIORITY}]")
