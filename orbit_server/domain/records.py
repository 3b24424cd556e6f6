"""The records the rules read and mutate: a task row's mutable part with the policy fields
the rules need (``TaskRec``), and an attempt row (``AttemptRec``). ``store.rows`` loads them
from rows and writes them back with compare-and-set."""

from __future__ import annotations

from msgspec import Struct

from orbit_wire.model import AttemptState, Idempotency, Outcome, TaskState

from .spec import Backoff


class TaskRec(Struct):
    """The mutable part of a task row plus the policy fields the rules read."""

    id: str
    queue_id: str
    state: TaskState
    idempotency: Idempotency
    max_attempts: int
    backoff: Backoff
    attempt_timeout_ms: int
    lease_ttl_ms: int
    deadline_at_ms: int
    available_at_ms: int
    epoch: int = 0
    attempts_started: int = 0
    uncertain: bool = False
    cancel_requested: bool = False
    current_attempt_id: str | None = None
    result: str | None = None
    failure_code: str | None = None
    failure_details: str | None = None
    updated_at_ms: int = 0
    finished_at_ms: int | None = None  # set by the store when the task becomes terminal
    start_by_at_ms: int | None = None  # policy schedule_to_start_ms; cleared once moot
    # Never loaded (None: left as stored); set when an attempt that did not succeed ends
    # with progress details, which become the next attempt's checkpoint.
    checkpoint: str | None = None
    # The workflow the task is a node of (None: a plain task, which no workflow rule reads).
    workflow_id: str | None = None
    # Never loaded, as ``checkpoint``: set when the node is released, its parents' results.
    parents_json: str | None = None


class AttemptRec(Struct):
    id: str
    task_id: str
    queue_id: str
    epoch: int
    attempt_number: int
    state: AttemptState
    instance_id: str
    reserved_at_ms: int
    child_pid: int | None = None
    started_at_ms: int | None = None
    finished_at_ms: int | None = None
    lease_expires_at_ms: int | None = None
    attempt_deadline_at_ms: int | None = None
    renewals: int = 0
    outcome: Outcome | None = None
    code: str | None = None
    retryable: bool | None = None
    details: str | None = None
    exit_code: int | None = None
    signal: int | None = None
    cpu_ms: int | None = None
    peak_rss_bytes: int | None = None
    kill_reason: str | None = None
    killed_at_ms: int | None = None  # the server's estimate of the SIGKILL's instant
    reap_ms: int | None = None  # the worker's measure of SIGKILL to reap
    ended_by: str | None = None  # after a cancel: COOPERATIVE or KILLED
    decision: str | None = None
    decision_rule: str | None = None
    # A lease granted with the dispatch that the worker has not confirmed yet (no renew,
    # finish, decline or resume entry seen): the connected_at_ms of the connection it was
    # granted to. None otherwise (docs/protocol.md, "Grants").
    grant_connection: int | None = None
    # The handler's latest progress (a renew's or the finish's): None until it reports one.
    progress_fraction: float | None = None
    progress_json: str | None = None
    progress_at_ms: int | None = None
