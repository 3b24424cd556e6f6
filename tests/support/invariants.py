"""Orbit's promises under faults, checked from the outside (pure: facts in, violations out).

Two records are compared: what the server says (each task's final view, its attempt history
and evidence, fetched over HTTP) and what really ran (the handlers' ``Journal``: one start
line per execution, the last wall-clock stamp of each, the exact result each returned; see
the ``sup.journal`` handler in tests/fixtures_handlers/supervisor_handlers.py). ``check``
returns the violations of each promise by name, so a report can print one column per
promise, and scripts/soak.py flattens the same checks into its list:

- ``one_state``: every task ended, in one state its history agrees with (SUCCEEDED exactly
  when one attempt's accepted outcome is SUCCEEDED), as its policy allows (IDEMPOTENT ends
  SUCCEEDED; NON_IDEMPOTENT ends SUCCEEDED or NEEDS_REVIEW) unless the scenario expects
  another end;
- ``ran_once``: no attempt ran twice; a NON_IDEMPOTENT task ran at most once;
- ``start_and_lease``: nothing ran without a confirmed start (the server's start instant is
  not after the handler's first line) or past its lease (the last stamp is not after the
  server's lease end), and no two attempts of a task overlapped;
- ``no_stale``: a SUCCEEDED result came from the task's newest epoch, reported while its
  lease held; a stale or late report is never the result;
- ``journal``: every SUCCEEDED result is the one its handler journaled.

Times are wall-clock ms of one machine (server and handlers share its clock).
"""

from __future__ import annotations

import collections
import itertools
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

CHECKS = ("one_state", "ran_once", "start_and_lease", "no_stale", "journal")
TITLES = {
    "one_state": "one state per task",
    "ran_once": "no attempt ran twice",
    "start_and_lease": "confirmed start, within lease",
    "no_stale": "no stale report taken",
    "journal": "results match journal",
}
SETTLED = ("SUCCEEDED", "FAILED", "NEEDS_REVIEW", "CANCELLED")


@dataclass
class TaskFacts:
    task_id: str
    idempotency: str
    state: str | None  # None: it did not end in time
    attempts: list[dict[str, Any]]  # the server's attempt history (attempt views)
    result: Any = None
    epoch: int | None = None
    evidence: list[dict[str, Any]] = field(default_factory=list)
    expect: tuple[str, ...] | None = None  # the ends a scenario expects, else by policy
    spent: int | None = None  # attempts the task's view counts as spent (None: unknown)


@dataclass(frozen=True)
class Run:
    task_id: str
    attempt_id: str
    at_ms: int | None = None  # the handler's first line
    pid: int | None = None


@dataclass
class Journal:
    runs: list[Run]
    last_ms: dict[str, int] = field(default_factory=dict)  # attempt -> last instruction
    results: dict[str, Any] = field(default_factory=dict)  # attempt -> the result returned

    @classmethod
    def load(cls, path: Path, stamps: Path) -> Journal:
        """Read a ``sup.journal`` handler's journal file and stamp folder."""
        runs: list[Run] = []
        last: dict[str, int] = {}
        results: dict[str, Any] = {}
        text = path.read_text() if path.exists() else ""
        for line in text.splitlines():
            kind, task_id, attempt_id, *rest = line.split(" ", 5)
            if kind == "start":
                runs.append(Run(task_id, attempt_id, int(rest[2]), int(rest[1])))
            elif kind == "end":
                last[attempt_id] = max(last.get(attempt_id, 0), int(rest[0]))
                results[attempt_id] = orjson.loads(rest[1])
        for name in os.listdir(stamps) if stamps.exists() else ():
            raw = (stamps / name).read_bytes().strip()
            if raw:
                last[name] = max(last.get(name, 0), int(raw))
        return cls(runs, last, results)

    def pids(self) -> dict[str, int]:
        return {r.attempt_id: r.pid for r in self.runs if r.pid is not None}


def check(tasks: Iterable[TaskFacts], journal: Journal) -> dict[str, list[str]]:
    """The violations of each promise (``CHECKS`` order); every list empty when all hold."""
    tasks = list(tasks)
    return {"one_state": _one_state(tasks), "ran_once": _ran_once(tasks, journal),
            "start_and_lease": _start_and_lease(tasks, journal),
            "no_stale": _no_stale(tasks, journal), "journal": _journal(tasks, journal)}


def _policy_ends(t: TaskFacts) -> tuple[str, ...]:
    if t.expect is not None:
        return t.expect
    return ("SUCCEEDED",) if t.idempotency == "IDEMPOTENT" else ("SUCCEEDED", "NEEDS_REVIEW")


def _one_state(tasks: list[TaskFacts]) -> list[str]:
    bad = []
    for t in tasks:
        if t.state is None:
            bad.append(f"task {t.task_id} did not end")
            continue
        won = [a["id"] for a in t.attempts if a["outcome"] == "SUCCEEDED"]
        if len(won) > 1:
            bad.append(f"{t.task_id} has {len(won)} SUCCEEDED attempts")
        if (t.state == "SUCCEEDED") != bool(won) and t.attempts:
            bad.append(f"{t.task_id} is {t.state} with SUCCEEDED attempts {won}")
        if t.state not in _policy_ends(t):
            kind = "idempotent" if t.idempotency == "IDEMPOTENT" else "non-idempotent"
            bad.append(f"{kind} {t.task_id} ended {t.state}")
    return bad


def _ran_once(tasks: list[TaskFacts], journal: Journal) -> list[str]:
    per_attempt = collections.Counter(r.attempt_id for r in journal.runs)
    per_task = collections.Counter(r.task_id for r in journal.runs)
    bad = [f"attempt {a} ran {n} times" for a, n in per_attempt.items() if n > 1]
    bad += [f"non-idempotent {t.task_id} ran {per_task[t.task_id]} times" for t in tasks
            if t.idempotency == "NON_IDEMPOTENT" and per_task[t.task_id] > 1]
    return bad


def _start_and_lease(tasks: list[TaskFacts], journal: Journal) -> list[str]:
    bad = []
    by_task = {t.task_id: t for t in tasks}
    runs_of: dict[str, list[Run]] = collections.defaultdict(list)
    for run in journal.runs:
        runs_of[run.task_id].append(run)
    for task_id, runs in runs_of.items():
        t = by_task.get(task_id)
        if t is None or t.state is None:
            continue  # reported by one_state (a task of the run must end)
        history = {a["id"]: a for a in t.attempts}
        for run in runs:
            att = history.get(run.attempt_id)
            started = None if att is None else att.get("started_at_ms")
            if att is None or started is None or (run.at_ms is not None and started > run.at_ms):
                bad.append(f"attempt {run.attempt_id} of {task_id} ran without a confirmed "
                           f"start (started_at_ms {started}, handler at {run.at_ms})")
                continue
            last = journal.last_ms.get(run.attempt_id)
            lease_end = att.get("lease_expires_at_ms")
            if last is not None and lease_end is not None and last > lease_end:
                bad.append(f"attempt {run.attempt_id} of {task_id} ran {last - lease_end} ms "
                           f"past its lease")
        timed = sorted((r for r in runs if r.at_ms is not None), key=lambda r: r.at_ms or 0)
        for before, after in itertools.pairwise(timed):
            end = journal.last_ms.get(before.attempt_id)
            if (before.attempt_id != after.attempt_id and end is not None
                    and after.at_ms is not None and after.at_ms < end):
                bad.append(f"attempts {before.attempt_id} and {after.attempt_id} of {task_id} "
                           f"overlapped by {end - after.at_ms} ms")
    return bad


def _no_stale(tasks: list[TaskFacts], journal: Journal) -> list[str]:
    bad = []
    ran = {r.attempt_id for r in journal.runs}
    for t in tasks:
        if t.state != "SUCCEEDED":
            continue
        won = [a for a in t.attempts if a["outcome"] == "SUCCEEDED"]
        if not any(a["id"] in ran for a in won):
            bad.append(f"{t.task_id} SUCCEEDED by an attempt that never ran")
            continue
        att = won[0]
        epoch = att.get("epoch")
        newest = max((a.get("epoch") or 0 for a in t.attempts
                      if a.get("started_at_ms") is not None), default=epoch)
        if epoch is not None and (epoch != newest or t.epoch not in (None, epoch)):
            bad.append(f"{t.task_id} SUCCEEDED by epoch {epoch}, newest {newest}")
        finished, lease_end = att.get("finished_at_ms"), att.get("lease_expires_at_ms")
        if finished is not None and lease_end is not None and finished > lease_end:
            bad.append(f"{t.task_id} took a report {finished - lease_end} ms after the lease")
    return bad


def _journal(tasks: list[TaskFacts], journal: Journal) -> list[str]:
    bad = []
    for t in tasks:
        if t.state != "SUCCEEDED" or not journal.results:
            continue  # a journal without results (scripts/soak.py's) has nothing to match
        won = [a["id"] for a in t.attempts if a["outcome"] == "SUCCEEDED"]
        if not won or won[0] not in journal.results:
            bad.append(f"{t.task_id} SUCCEEDED without a journaled result")
        elif journal.results[won[0]] != t.result:
            bad.append(f"{t.task_id} result {t.result!r} is not the journaled "
                       f"{journal.results[won[0]]!r}")
    return bad


# ---------------------------------------------------------------- attempts and grants


@dataclass(frozen=True)
class AttemptLedger:
    """What a run spent and ran, for ``attempt_accounting``: the attempts the tasks' views
    count as spent, the attempt ID of each handler execution (the journal), the grants
    whose lease ran out while unconfirmed (attempts.grant_connection still set), and the
    attempts a ``claim`` op started (its receipts)."""

    spent: int
    executions: list[str]
    expired_unconfirmed: frozenset[str]
    claimed: frozenset[str]


def attempt_accounting(ledger: AttemptLedger) -> list[str]:
    """The issue's ``attempts started - handler executions = grants expired unconfirmed``,
    made exact: a grant the worker received and ran but never confirmed before its lease
    ran out (``ran_unconfirmed``: in the journal) counts on both sides, and an attempt a
    claim started whose answer never reached a running handler (its process died first)
    is spent without being a grant. So, with no attempts started ahead of a free child
    (prefetch 0):

        spent - executions = expired_unconfirmed - ran_unconfirmed + claimed_never_ran

    It fails when a spent attempt never ran for any other reason (a grant confirmed but
    never run, a handler lost), or when the counts disagree."""
    ran = set(ledger.executions)
    ran_unconfirmed = ledger.expired_unconfirmed & ran
    claimed_never_ran = ledger.claimed - ran
    left = ledger.spent - len(ledger.executions)
    right = len(ledger.expired_unconfirmed) - len(ran_unconfirmed) + len(claimed_never_ran)
    if left == right:
        return []
    return [f"attempts started {ledger.spent} - handler executions {len(ledger.executions)} "
            f"= {left}, but grants expired unconfirmed {len(ledger.expired_unconfirmed)} - "
            f"of them run {len(ran_unconfirmed)} + claimed never run "
            f"{len(claimed_never_ran)} = {right}"]


# ---------------------------------------------------------------- kill latencies


def killed_after_lease_end(tasks: Iterable[TaskFacts], journal: Journal) -> list[int]:
    """For every execution that was killed (no result journaled, attempt UNKNOWN): its last
    instruction minus the server's lease end, in ms (negative: before the lease end)."""
    out = []
    for t in tasks:
        for att in t.attempts:
            a = att["id"]
            if (att["outcome"] == "UNKNOWN" and a not in journal.results
                    and a in journal.last_ms and att.get("lease_expires_at_ms") is not None
                    and att.get("kill_reason") != "TEMPLATE_LOST"):
                out.append(journal.last_ms[a] - int(att["lease_expires_at_ms"]))
    return out


def summary(values: Iterable[float]) -> dict[str, float] | None:
    """n, p50, p99 and max of some measurements (None when there are none)."""
    ordered = sorted(values)
    if not ordered:
        return None

    def pct(q: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]

    return {"n": len(ordered), "p50": pct(0.5), "p99": pct(0.99), "max": ordered[-1]}


def flatten(found: Mapping[str, list[str]]) -> list[str]:
    return [v for name in CHECKS for v in found.get(name, [])]
