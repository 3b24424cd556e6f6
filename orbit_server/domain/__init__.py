"""The pure rules of Orbit's server: task specs, the frozen policy, the task and attempt state
machines, the retry decision, backoff and lease arithmetic.

Everything that decides a state lives in this package (h11 style), one concern a module:

    spec          TaskSpec, Policy, Backoff, parse_task_spec (a submission and its defaults)
    policies      registration (what a hello registers), resolve_policy (the registered
                  policy filling what a submit left out)
    bodies        the HTTP request bodies as Structs (fields: Body, the shared field types)
    states        TaskEvent, AttemptEvent, the transition tables, IllegalTransition
    records       TaskRec, AttemptRec (what the rules read and mutate)
    decisions     Decision, Rule, Verdict, decide (the retry policy), lease arithmetic
    reports       FinishReport, CheckedReport, check_report (a worker's finish report)
    progress      CheckedProgress, check_progress, apply_progress (a handler's progress)
    transitions   reserve, release, start, renew, finish, expire, cancel, the deadline,
                  review, rerun (an ended task run again), resume

The tables ``TASK_TRANSITIONS`` and ``ATTEMPT_TRANSITIONS`` list every legal move; a function
that would make an illegal one raises ``IllegalTransition`` (code CONFLICT) *before* changing
anything, so a record is never left half-updated. Time is always an argument (``now_ms``,
wall-clock milliseconds) and every random draw is passed in (``draw`` in [0, 1)). No I/O, no
clock, no database.

The services load rows into ``TaskRec``/``AttemptRec``, call these functions (which mutate
the records in place after checking) and write the records back with compare-and-set.
Import from this package; the modules are its layout, not its interface.
"""

from .bodies import ReviewAction
from .decisions import Decision, Rule, Verdict, decide, lease_holds, lease_ms
from .policies import Registration, registration, resolve_policy
from .progress import CheckedProgress, apply_progress, check_progress
from .records import AttemptRec, TaskRec
from .reports import (
    CheckedReport,
    FinishReport,
    apply_report_facts,
    check_report,
    is_reap_follow_up,
    keep_late_facts,
    killed_at_ms,
)
from .spec import Backoff, Policy, TaskSpec, parse_task_spec
from .states import (
    ATTEMPT_TRANSITIONS,
    TASK_TRANSITIONS,
    AttemptEvent,
    IllegalTransition,
    TaskEvent,
    next_attempt_state,
    next_task_state,
)
from .transitions import (
    EvidenceReason,
    FinishResult,
    ResumeStatus,
    RunBudget,
    cancel,
    confirm_grant,
    decline,
    expire,
    expire_deadline,
    expire_start_by,
    finish,
    grant,
    name_late_cause,
    release,
    release_unreceived,
    renew,
    rerun,
    reserve,
    resume_status,
    retry_not_before,
    review,
    run_budget,
    start,
)

__all__ = [
    "ATTEMPT_TRANSITIONS",
    "TASK_TRANSITIONS",
    "AttemptEvent",
    "AttemptRec",
    "Backoff",
    "CheckedProgress",
    "CheckedReport",
    "Decision",
    "EvidenceReason",
    "FinishReport",
    "FinishResult",
    "IllegalTransition",
    "Policy",
    "Registration",
    "ResumeStatus",
    "ReviewAction",
    "Rule",
    "RunBudget",
    "TaskEvent",
    "TaskRec",
    "TaskSpec",
    "Verdict",
    "apply_progress",
    "apply_report_facts",
    "cancel",
    "check_progress",
    "check_report",
    "confirm_grant",
    "decide",
    "decline",
    "expire",
    "expire_deadline",
    "expire_start_by",
    "finish",
    "grant",
    "is_reap_follow_up",
    "keep_late_facts",
    "killed_at_ms",
    "lease_holds",
    "lease_ms",
    "name_late_cause",
    "next_attempt_state",
    "next_task_state",
    "parse_task_spec",
    "registration",
    "release",
    "release_unreceived",
    "renew",
    "rerun",
    "reserve",
    "resolve_policy",
    "resume_status",
    "retry_not_before",
    "review",
    "run_budget",
    "start",
]
