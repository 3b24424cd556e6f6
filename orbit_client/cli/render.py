"""Human views of the API's answers: task summaries, tables, the --wait progress line.

Pure: every function takes the answer and ``now_ms`` and returns a rich renderable (or a
string); nothing here prints, reads a clock or talks to the server. The JSON form of each
answer is the server's own shape and needs no code here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from .timefmt import ago, duration, stamp

STATE_STYLES = {
    "PENDING": "blue",
    "RUNNING": "cyan",
    "SUCCEEDED": "green",
    "FAILED": "red",
    "NEEDS_REVIEW": "yellow",
    "CANCELLED": "magenta",
}
DEFAULT_PRIORITY = 5  # shown only when a task has another
SETTLED = ("SUCCEEDED", "FAILED", "NEEDS_REVIEW", "CANCELLED")
ORDERED_STATES = ("PENDING", "RUNNING", "NEEDS_REVIEW", "SUCCEEDED", "FAILED", "CANCELLED")

# The rule behind an attempt's decision, said for an operator (unknown rules show as sent).
RULE_WORDS = {
    "handler_succeeded": "the handler succeeded",
    "explicit_failure": "the handler failed and asked for no retry",
    "retryable_failure_retry": "a retryable failure, so it runs again",
    "unknown_outcome_idempotent_retry": "the outcome is unknown; the task is idempotent, "
                                        "so it runs again",
    "unknown_outcome_non_idempotent": "the outcome is unknown and the task is not "
                                      "idempotent, so an operator decides",
    "uncertain_history": "an earlier attempt's outcome is unknown, so an operator decides",
    "retry_budget_exhausted": "no attempts left",
    "deadline_exhausted": "no time left before the task's deadline",
    "task_cancelled": "the task was cancelled",
    "session_ended": "the worker went away before starting it",
    "reservation_expired": "the worker did not start it in time",
    "deadline_passed": "the task's deadline passed",
}
DECISION_WORDS = {
    "SUCCEEDED": "succeeded",
    "RETRY": "will retry",
    "FAILED": "failed",
    "NEEDS_REVIEW": "sent to review",
    "CANCELLED": "cancelled",
    "RELEASED": "handed back to the queue",
}


def state_text(state: str) -> Text:
    return Text(state, style=STATE_STYLES.get(state, ""))


def compact(value: Any, limit: int = 200) -> str:
    """A JSON value on one line, cut at ``limit`` characters."""
    text = orjson.dumps(value).decode()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def capability(cap: Mapping[str, Any] | None) -> str:
    if not cap:
        return "-"
    return (f"{cap.get('handler', '?')} {cap.get('handler_version', '?')}"
            f" · payload {cap.get('payload_version', '?')}")


def _short(ident: Any) -> str:
    return "-" if not ident else str(ident)


# ----------------------------------------------------------------------------- one task


# What the task view's policy_source says, in words.
_POLICY_SOURCES = {
    "registered": "registered (declared by its worker's TaskType)",
    "submit": "as submitted",
    "default": "server defaults",
}


def task_summary(
    task: Mapping[str, Any], last_attempt: Mapping[str, Any] | None, now_ms: int
) -> RenderableType:
    """A task on a few lines: what it runs, where it stands, its result or failure, and the
    story of its last attempt."""
    state = str(task.get("state", "?"))
    head = Text.assemble(("Task ", "bold"), (str(task.get("id")), "bold"), "  ",
                         state_text(state))
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="dim", no_wrap=True)
    grid.add_column()
    grid.add_row("handler", capability(task.get("capability")))
    grid.add_row("queue", _short(task.get("queue_id")))
    created = task.get("created_at_ms")
    grid.add_row("created", f"{ago(created, now_ms)} ({stamp(created)})")
    updated = task.get("updated_at_ms")
    if state in SETTLED and state != "NEEDS_REVIEW":
        finished = task.get("finished_at_ms") or updated
        took = None if created is None or finished is None else finished - created
        grid.add_row("finished", f"{ago(finished, now_ms)}, {duration(took)} after submit")
    elif state == "NEEDS_REVIEW":
        grid.add_row("in review", f"since {ago(updated, now_ms)}: resolve it with "
                                  "`orbit tasks review ID --retry|--succeed|--fail`")
    policy = task.get("policy") or {}
    idem = "idempotent" if policy.get("idempotency") == "IDEMPOTENT" else "not idempotent"
    grid.add_row("attempts", f"{task.get('attempts', 0)} of {policy.get('max_attempts', '?')}"
                             f" · {idem}")
    source = _POLICY_SOURCES.get(str(task.get("policy_source")))
    timeout = policy.get("attempt_timeout_ms")
    progress_timeout = policy.get("progress_timeout_ms")
    grid.add_row("policy", f"attempt timeout {duration(timeout)}"
                           + ("" if progress_timeout is None
                              else f" · progress timeout {duration(progress_timeout)}")
                           + ("" if source is None else f" · {source}"))
    if policy.get("requires"):
        grid.add_row("requires", labels_text(policy["requires"]))
    if task.get("priority") not in (None, DEFAULT_PRIORITY):
        grid.add_row("priority", str(task["priority"]))
    if task.get("operation_key"):
        grid.add_row("operation key", str(task["operation_key"]))
    waiting = task.get("waiting")
    if state == "PENDING" and isinstance(waiting, Mapping):
        words = _waiting_words(waiting, now_ms)
        if waiting.get("reason") == "NO_LIVE_WORKER":
            words += ": check the handler and versions against `orbit workers list`"
        elif waiting.get("reason") == "NO_MATCHING_WORKER":
            words += ": no live worker has these labels (`orbit workers list`)"
        grid.add_row("waiting", Text(words, style="yellow"))
    nxt = task.get("next_attempt_at_ms")
    if state == "PENDING" and isinstance(nxt, int) and nxt > now_ms:
        grid.add_row("next attempt", ago(nxt, now_ms))
    if state in ("PENDING", "RUNNING"):
        grid.add_row("deadline", ago(task.get("deadline_at_ms"), now_ms))
    if task.get("cancel_requested") and state != "CANCELLED":
        grid.add_row("cancel", "requested; the worker kills the handler")
    # The result's exact text, as the handler produced it, when the client kept it.
    raw = task.get("result_json")
    if raw is None and "result" in task and (task["result"] is not None or state == "SUCCEEDED"):
        raw = compact(task["result"], 2000)  # SUCCEEDED with null: the handler returned None
    if raw is not None:
        text = str(raw) if len(str(raw)) <= 2000 else str(raw)[:1999] + "…"
        grid.add_row("result", Text(text, style="green"))
    failure = task.get("failure")
    if isinstance(failure, Mapping):
        details = failure.get("details")
        text = str(failure.get("code"))
        if isinstance(details, Mapping) and details.get("exception_type"):
            text += f": {details['exception_type']}"
            if details.get("exception_message"):  # orbit-supervise --report-exception-messages
                text += f": {details['exception_message']}"
            text += " (the traceback is in the worker's log)"
            details = {k: v for k, v in details.items()
                       if k not in ("exception_type", "exception_message")}
        if details:
            text += " " + compact(details)
        grid.add_row("failure", Text(text, style="red"))
    if last_attempt is not None:
        grid.add_row("last attempt", attempt_story(last_attempt, now_ms))
        progress = last_attempt.get("progress")
        if isinstance(progress, Mapping):
            grid.add_row("progress", progress_words(progress, now_ms))
    if task.get("checkpoint") is not None:
        grid.add_row("checkpoint", compact(task["checkpoint"]) + " (the next attempt's)")
    return Group(head, grid)


def percent(fraction: Any) -> str:
    """A progress fraction as a percentage ("-" when the handler gave none)."""
    if not isinstance(fraction, (int, float)) or isinstance(fraction, bool):
        return "-"
    return f"{fraction * 100:.0f}%"


def progress_words(progress: Mapping[str, Any], now_ms: int) -> str:
    """An attempt's latest progress: the percentage, its details, when it came."""
    words = [percent(progress.get("fraction"))]
    if progress.get("details") is not None:
        words.append(compact(progress["details"], 120))
    words.append(f"reported {ago(progress.get('at_ms'), now_ms)}")
    return " · ".join(words)
def labels_text(labels: object) -> str:
    """``{"gpu": "a100"}`` as ``gpu=a100`` (pairs joined by commas; "" for none)."""
    if not isinstance(labels, Mapping):
        return ""
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def _waiting_words(waiting: Mapping[str, Any], now_ms: int) -> str:
    reason = str(waiting.get("reason") or "waiting")
    cap = waiting.get("capability")
    words = reason.replace("_", " ").lower() if reason.isupper() else reason
    if isinstance(cap, Mapping):
        words += f" ({capability(cap)})"
    if isinstance(waiting.get("requires"), Mapping):
        words += f" requires {labels_text(waiting['requires'])}"
    if waiting.get("key") is not None:  # LIMIT_FULL: the key and the limit holding it
        words += (f" ({waiting.get('key')}: {waiting.get('bound')} {waiting.get('max')} "
                  f"of {waiting.get('limit')})")
    since = waiting.get("since") or waiting.get("since_ms")
    if isinstance(since, int):
        words += f", since {ago(since, now_ms)}"
    pause = waiting.get("pause")
    if isinstance(pause, Mapping):  # PAUSED: who paused it and why
        words += f" (by {pause.get('paused_by')}: {pause.get('reason')})"
    return words


def pause_words(pause: Mapping[str, Any]) -> str:
    """A pause in force: what it covers, who and why."""
    what = ("the queue" if pause.get("handler") is None else str(pause.get("handler"))
            + ("" if pause.get("handler_version") is None
               else f" {pause.get('handler_version')}"))
    return f"{what} by {pause.get('paused_by')}: {pause.get('reason')}"


def attempt_story(attempt: Mapping[str, Any], now_ms: int) -> str:
    """One attempt in a sentence or two: who ran it, how long, how it ended, what came next."""
    parts = [f"#{attempt.get('attempt_number', '?')}"]
    if attempt.get("instance_id"):
        parts.append(f"on worker {attempt['instance_id']}")
    if attempt.get("child_pid"):
        parts.append(f"(pid {attempt['child_pid']})")
    story = " ".join(parts)
    started, finished = attempt.get("started_at_ms"), attempt.get("finished_at_ms")
    state = attempt.get("state")
    if started is None:
        story += f": reserved {ago(attempt.get('reserved_at_ms'), now_ms)}, never started"
    elif finished is None:
        story += f": running for {duration(now_ms - started)}"
        lease = attempt.get("lease_expires_at_ms")
        if state == "RUNNING" and isinstance(lease, int):
            story += f", lease ends {ago(lease, now_ms)}"
    else:
        story += f": started {ago(started, now_ms)}, ran {duration(finished - started)}"
    ended = _ending(attempt)
    if ended:
        story += f"; {ended}"
    decision = attempt.get("decision")
    if decision:
        words = DECISION_WORDS.get(str(decision), str(decision))
        rule = attempt.get("decision_rule")
        why = RULE_WORDS.get(str(rule), str(rule)) if rule and decision != "SUCCEEDED" else ""
        story += f"; then {words}" + (f" ({why})" if why else "")
    return story


def _ending(attempt: Mapping[str, Any]) -> str:
    outcome = attempt.get("outcome")
    if not outcome:
        return ""
    text = f"ended {outcome}"
    if attempt.get("code"):
        text += f" ({attempt['code']})"
    details = attempt.get("details")
    if isinstance(details, Mapping) and details.get("exception_type"):
        text += f": {details['exception_type']}"  # the handler's exception, by type name
    facts = _end_facts(attempt)
    if attempt.get("cpu_ms") is not None:
        facts.append(f"cpu {duration(attempt['cpu_ms'])}")
    if attempt.get("peak_rss_bytes"):
        facts.append(f"peak memory {size(attempt['peak_rss_bytes'])}")
    return text + (f", {', '.join(facts)}" if facts else "")


def _how(attempt: Mapping[str, Any]) -> str:
    """How the child ended, when that is news: a cancel, a kill, a signal, an exit code."""
    return ", ".join(_end_facts(attempt)) or "-"


def _end_facts(attempt: Mapping[str, Any]) -> list[str]:
    """The facts of how the child ended that are news: a cancel, a kill, a signal, an exit
    code, the kill's timing."""
    facts = _cancel_ending(attempt)
    if attempt.get("kill_reason"):
        facts.append(f"killed: {str(attempt['kill_reason']).replace('_', ' ').lower()}")
    if attempt.get("signal"):
        facts.append(f"signal {attempt['signal']}")
    elif attempt.get("exit_code") not in (None, 0):
        facts.append(f"exit code {attempt['exit_code']}")
    facts.extend(_kill_timing(attempt))
    return facts


def _cancel_ending(attempt: Mapping[str, Any]) -> list[str]:
    """Which ended a cancelled attempt: its handler, or a SIGKILL (the kill reason says
    which kill; a lease kill may have come before the grace ran out)."""
    ended_by = attempt.get("ended_by")
    if ended_by == "COOPERATIVE":
        return ["stopped by itself on cancel"]
    if ended_by == "KILLED" and attempt.get("kill_reason") != "TASK_CANCELLED":
        return ["cancelled, then killed"]
    return []


def _kill_timing(attempt: Mapping[str, Any]) -> list[str]:
    """When a kill came against the lease end, or that the handler never ran at all."""
    if not attempt.get("kill_reason"):
        return []
    after = attempt.get("kill_after_lease_end_ms")
    if after is not None:
        return [f"{abs(after)} ms {'before' if after < 0 else 'after'} the lease end"]
    if attempt.get("child_pid") is None and attempt.get("signal") is None:
        return ["the handler never ran"]
    return []


def size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover


def progress_line(task: Mapping[str, Any], waited_ms: int, wait_ms: int) -> str:
    """The --wait status line: state, attempt and time waited, with why a task is waiting."""
    state = str(task.get("state", "?"))
    attempts = task.get("attempts") or 0
    line = f"{state} · " + (f"attempt {attempts}" if attempts else "no attempt yet")
    line += f" · {duration(waited_ms)} of {duration(wait_ms)}"
    waiting = task.get("waiting")
    if state == "PENDING" and isinstance(waiting, Mapping):
        line += f" · {_waiting_words(waiting, 0).split(', since')[0]}"
    return line


# ------------------------------------------------------------------------------- tables


# Columns that hold IDs (and a replica's host:port): never wrapped nor cut (an ID is copied
# into the next command); cli/output.py widens a table past the terminal rather than cut them.
ID_COLUMNS = frozenset({"id", "instance", "worker", "queue", "queues", "task", "attempt",
                        "credential", "replica"})


def _table(*columns: str, title: str | None = None) -> Table:
    table = Table(title=title, title_justify="left", box=None, header_style="bold",
                  pad_edge=False)
    for name in columns:
        table.add_column(name, no_wrap=name in ID_COLUMNS)
    return table


def _progress_cell(progress: Any) -> str:
    return percent(progress.get("fraction")) if isinstance(progress, Mapping) else "-"


def attempts_view(history: Mapping[str, Any], now_ms: int) -> RenderableType:
    attempts: Sequence[Mapping[str, Any]] = history.get("attempts") or []
    if not attempts:
        body: RenderableType = Text("No attempts yet.")
    else:
        table = _table("#", "worker", "pid", "started", "ran", "progress", "outcome", "how",
                       "cpu", "memory", "then")
        for a in attempts:
            started, finished = a.get("started_at_ms"), a.get("finished_at_ms")
            ran = (None if started is None else
                   (finished if finished is not None else now_ms) - started)
            outcome = str(a.get("outcome") or a.get("state") or "-")
            if a.get("code"):
                outcome += f" ({a['code']})"
            details = a.get("details")
            if isinstance(details, Mapping) and details.get("exception_type"):
                outcome += f": {details['exception_type']}"
            then = DECISION_WORDS.get(str(a.get("decision")), str(a.get("decision") or "-"))
            rule = a.get("decision_rule")
            if rule and a.get("decision") != "SUCCEEDED":
                then += f" ({RULE_WORDS.get(str(rule), str(rule))})"
            peak = a.get("peak_rss_bytes")
            table.add_row(str(a.get("attempt_number")), _short(a.get("instance_id")),
                          str(a.get("child_pid") or "-"), ago(started, now_ms), duration(ran),
                          _progress_cell(a.get("progress")), outcome, _how(a),
                          duration(a.get("cpu_ms")), size(peak) if peak else "-", then)
        body = table
    evidence: Sequence[Mapping[str, Any]] = history.get("evidence") or []
    if not evidence:
        return body
    late = _table("received", "attempt", "worker", "outcome", "why kept",
                  title="Late reports kept as evidence")
    for e in evidence:
        late.add_row(ago(e.get("received_at_ms"), now_ms), _short(e.get("attempt_id")),
                     _short(e.get("instance_id")),
                     f"{e.get('outcome')}" + (f" ({e['code']})" if e.get("code") else ""),
                     str(e.get("reason") or "-"))
    return Group(body, Text(""), late)


def audit_view(events: Sequence[Mapping[str, Any]], now_ms: int) -> RenderableType:
    if not events:
        return Text("No events.")
    table = _table("when", "actor", "event", "change", "detail")
    for e in events:
        change = ""
        if e.get("from_state") or e.get("to_state"):
            change = f"{e.get('from_state') or '·'} → {e.get('to_state') or '·'}"
        detail = e.get("detail")
        table.add_row(ago(e.get("at_ms"), now_ms), str(e.get("actor")),
                      str(e.get("kind", "")).replace("_", " "), change,
                      compact(detail, 120) if detail not in (None, {}, "") else "")
    return table


def stats_view(stats: Mapping[str, Any], now_ms: int) -> RenderableType:
    counts: Mapping[str, int] = stats.get("counts") or {}
    head = Text.assemble(("Queue ", "bold"), (str(stats.get("queue_id")), "bold"))
    table = _table("state", "tasks")
    table.columns[1].justify = "right"
    names = [s for s in ORDERED_STATES if s in counts] + sorted(set(counts) - set(ORDERED_STATES))
    for name in names:
        table.add_row(state_text(name), str(counts[name]))
    if not names:
        table.add_row("(no tasks)", "0")
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="dim")
    facts.add_column()
    facts.add_row("running attempts", str(stats.get("running_attempts", 0)))
    oldest = stats.get("oldest_pending_age_ms")
    facts.add_row("oldest pending", "-" if oldest is None else f"waiting {duration(oldest)}")
    for pause in stats.get("paused") or ():
        facts.add_row("paused", Text(pause_words(pause), style="yellow"))
    if stats.get("fair"):
        facts.add_row("fair dispatch", f"turns by {stats['fair']}")
    by_priority = stats.get("pending_by_priority")
    if isinstance(by_priority, Mapping) and by_priority:
        order = sorted(by_priority, key=lambda p: -int(p) if str(p).isdigit() else 0)
        facts.add_row("pending by priority",
                      " · ".join(f"{p}: {by_priority[p]}" for p in order))
    if stats.get("pending_delayed"):
        facts.add_row("delayed", f"{stats['pending_delayed']} pending tasks wait for a delay "
                                 "or a retry backoff")
    known = {"queue_id", "counts", "running_attempts", "oldest_pending_age_ms", "capabilities",
             "pending_by_priority", "pending_delayed"}
    for key in sorted(set(stats) - known):  # fields added later still show, as JSON
        facts.add_row(key.replace("_", " "), compact(stats[key], 400))
    parts: list[RenderableType] = [head, table, Text(""), facts]
    caps = stats.get("capabilities")
    if isinstance(caps, list) and caps:
        parts += [Text(""), capabilities_table(caps, now_ms)]
    return Group(*parts)


def tasks_table(tasks: Sequence[Mapping[str, Any]], now_ms: int) -> RenderableType:
    """A page of ``orbit tasks list``: full IDs (to copy into the next command)."""
    if not tasks:
        return Text("No tasks match.")
    table = _table("id", "state", "handler", "tries", "created", "finished", "note")
    for t in tasks:
        note = ""
        failure = t.get("failure")
        if isinstance(failure, Mapping) and failure.get("code"):
            note = str(failure["code"])
            details = failure.get("details")
            if isinstance(details, Mapping) and details.get("exception_type"):
                note += f": {details['exception_type']}"
        waiting = t.get("waiting")
        if t.get("state") == "PENDING" and isinstance(waiting, Mapping):
            note = _waiting_words({**waiting, "capability": None}, now_ms)
        cap = t.get("capability") or {}
        table.add_row(str(t.get("id")), state_text(str(t.get("state"))),
                      f"{cap.get('handler', '?')} {cap.get('handler_version', '?')}",
                      str(t.get("attempts", 0)), ago(t.get("created_at_ms"), now_ms),
                      ago(t.get("finished_at_ms"), now_ms), note)
    return table


def queues_table(queues: Sequence[Mapping[str, Any]], now_ms: int) -> RenderableType:
    if not queues:
        return Text("No queues.")
    table = _table("id", "name", "created", *ORDERED_STATES)
    for column in table.columns[3:]:
        column.justify = "right"
    for q in queues:
        counts: Mapping[str, int] = q.get("counts") or {}
        created = q.get("created_at", q.get("created_at_ms"))
        name = str(q.get("name") or "-") + (" (paused)" if q.get("paused") else "")
        table.add_row(str(q.get("queue_id", q.get("id"))), name,
                      ago(created if isinstance(created, int) else None, now_ms),
                      *(str(counts.get(s, 0)) for s in ORDERED_STATES))
    return table


def registered_view(answer: Mapping[str, Any], now_ms: int) -> RenderableType:
    """A queue's registered capabilities and the policy each declares."""
    registered: Sequence[Mapping[str, Any]] = answer.get("capabilities") or []
    if not registered:
        return Text("No capability registered: no worker has connected to this queue.")
    table = _table("handler", "version", "payload", "declared policy", "registered")
    for entry in registered:
        cap: Mapping[str, Any] = entry.get("capability") or {}
        policy: Mapping[str, Any] = entry.get("policy") or {}
        words = ", ".join(f"{k} {v if isinstance(v, str) else compact(v, 80)}"
                          for k, v in policy.items())
        registered_at = entry.get("registered_at_ms")
        table.add_row(str(cap.get("handler")), str(cap.get("handler_version")),
                      str(cap.get("payload_version")), words or "none (server defaults)",
                      ago(registered_at if isinstance(registered_at, int) else None, now_ms))
    return table


def workers_view(workers: Sequence[Mapping[str, Any]], now_ms: int) -> RenderableType:
    """Live workers, then what each is running."""
    if not workers:
        return Text("No live workers.")
    table = _table("instance", "queue", "replica", "version", "capabilities", "labels",
                   "slots", "credit", "busy", "connected", "heartbeat")
    running = _table("instance", "task", "attempt", "pid", "running for",
                     title="Running attempts")
    for w in workers:
        caps = ", ".join(f"{c.get('handler')} {c.get('handler_version')}/"
                         f"{c.get('payload_version')}" for c in w.get("capabilities") or [])
        busy: Sequence[Mapping[str, Any]] = w.get("running") or []
        table.add_row(str(w.get("instance_id")), _short(w.get("queue_id")),
                      _short(w.get("replica")), _short(w.get("version")), caps or "-",
                      labels_text(w.get("labels")) or "-", str(w.get("slots", "-")),
                      str(w.get("credit", "-")), str(len(busy)),
                      ago(w.get("connected_at"), now_ms), ago(w.get("last_heartbeat_at"), now_ms))
        for r in busy:
            running.add_row(str(w.get("instance_id")), _short(r.get("task_id")),
                            _short(r.get("attempt_id")), str(r.get("child_pid") or "-"),
                            duration(r.get("running_ms")))
    if not running.rows:
        return table
    return Group(table, Text(""), running)


def credentials_table(credentials: Sequence[Mapping[str, Any]], now_ms: int) -> RenderableType:
    """``orbit credentials list``: who may do what, and whether it still may (no secrets)."""
    if not credentials:
        return Text("No credentials.")
    table = _table("credential", "role", "name", "queues", "created", "last used", "expires",
                   "revoked")
    for c in credentials:
        queues = c.get("queues") or []
        revoked = c.get("revoked_at_ms")
        table.add_row(str(c.get("credential_id")), str(c.get("role") or "-"),
                      str(c.get("name") or "-"),
                      "every queue" if c.get("role") == "admin" else
                      " ".join(str(q) for q in queues) or "-",
                      ago(c.get("created_at_ms"), now_ms),
                      ago(c.get("last_used_at_ms"), now_ms) if c.get("last_used_at_ms")
                      else "never",
                      ago(c.get("expires_at_ms"), now_ms) if c.get("expires_at_ms") else "-",
                      Text(ago(revoked, now_ms), style="red") if revoked else "-")
    return table


def capabilities_table(rows: Sequence[Mapping[str, Any]], now_ms: int) -> RenderableType:
    """Queue stats per capability: pending tasks beside the live workers offering it."""
    table = _table("capability", "pending", "live workers", "waiting")
    table.columns[1].justify = table.columns[2].justify = "right"
    for row in rows:
        waiting = row.get("waiting")
        live = int(row.get("live_workers") or 0)
        table.add_row(capability(row.get("capability")), str(row.get("pending", 0)),
                      Text(str(live), style="" if live or not row.get("pending") else "red"),
                      _waiting_words({**waiting, "capability": None}, now_ms)
                      if isinstance(waiting, Mapping) else "")
    return table
