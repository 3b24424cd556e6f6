"""``TaskType``: one declaration of a capability, shared by the producer and the worker.

    # app/tasks.py, imported by both sides
    from orbit_wire import TaskType
    normalize: TaskType[dict[str, str], dict[str, str]] = TaskType("text.normalize", "v1", "v1")

The worker registers a function for it (``orbit_child.Handlers.task``); the producer submits
with it (``orbit_client.OrbitClient.submit``). The two type parameters (payload, result)
are for static checkers only; nothing is validated against them at run time. It lives in
orbit_wire because both orbit_client and orbit_child may import it. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from .errors import ErrorCode, OrbitError
from .fails_on import FailsOn, check_fails_on
from .limits import MAX_DELAY_MS, MAX_NAME_LEN, MAX_PRIORITY, MIN_PRIORITY
from .model import Capability, Idempotency
from .names import is_name

__all__ = ["TaskType"]

P = TypeVar("P")  # the payload
R = TypeVar("R")  # the result

# Policy fields a submit may set besides the payload (docs/http-api.md "TaskSpec").
_POLICY_FIELDS = frozenset({"max_attempts", "backoff", "attempt_timeout_ms", "deadline_ms",
                            "lease_ttl_ms"})


@dataclass(frozen=True, slots=True)
class TaskType(Generic[P, R]):
    """A capability (handler, handler_version, payload_version) and its submit defaults.

    ``idempotent`` is a property of the work, so it is declared here once (a submit may
    still override it); ``priority`` (MIN_PRIORITY-MAX_PRIORITY) is the default priority.
    ``fails_on``: the exception types the worker reports as an explicit FAILED, each
    ``Retryable(type)`` or not (orbit_wire/fails_on.py). Raises OrbitError BAD_REQUEST for
    a name that breaks the capability rule or a bad ``fails_on``.
    """

    handler: str
    handler_version: str
    payload_version: str
    idempotent: bool = False
    priority: int | None = None
    fails_on: FailsOn = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "fails_on", check_fails_on(self.fails_on))
        for name in ("handler", "handler_version", "payload_version"):
            if not is_name(getattr(self, name)):
                raise OrbitError(ErrorCode.BAD_REQUEST,
                                 f"TaskType {name} must be 1-{MAX_NAME_LEN} characters of "
                                 "[A-Za-z0-9._:/-]")
        _check_priority(self.priority)

    @property
    def capability(self) -> Capability:
        return Capability(self.handler, self.handler_version, self.payload_version)

    def spec(self, payload: P, *, idempotent: bool | None = None,
             operation_key: str | None = None, priority: int | None = None,
             delay_ms: int | None = None, not_before_at_ms: int | None = None,
             **policy: Any) -> dict[str, Any]:
        """The TaskSpec dict for one submit. ``policy`` takes the other TaskSpec fields
        (max_attempts, backoff, attempt_timeout_ms, deadline_ms, lease_ttl_ms); an unknown
        one is BAD_REQUEST here rather than at the server."""
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
        chosen = self.priority if priority is None else priority
        _check_priority(chosen)
        safe = self.idempotent if idempotent is None else idempotent
        spec: dict[str, Any] = {
            **self.capability.to_dict(),
            "payload": payload,
            "idempotency": (Idempotency.IDEMPOTENT if safe else Idempotency.NON_IDEMPOTENT).value,
        }
        extra: Mapping[str, Any] = {
            "operation_key": operation_key, "priority": chosen, "delay_ms": delay_ms,
            "not_before_at_ms": not_before_at_ms, **policy,
        }
        spec.update({k: v for k, v in extra.items() if v is not None})
        return spec

    def __str__(self) -> str:
        return str(self.capability)


def _check_priority(priority: object) -> None:
    if priority is None:
        return
    if (isinstance(priority, bool) or not isinstance(priority, int)
            or not MIN_PRIORITY <= priority <= MAX_PRIORITY):
        raise OrbitError(ErrorCode.BAD_REQUEST,
                         f"priority must be an integer in [{MIN_PRIORITY}, {MAX_PRIORITY}]")
