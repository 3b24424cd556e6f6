"""The CLI's pure parts with a fixed clock: readable times, exit codes by state, the human
views (rendered to text by rich, no terminal), the error lines and their next steps, and the
usage errors found before anything is sent. The words of the CLI are tested here; the e2e
tests (tests/e2e/test_cli*.py) check exit codes, JSON and which form comes where."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from orbit_client.cli import cli, exits, render
from orbit_client.cli.app import error_line
from orbit_client.cli.args import parse_instant
from orbit_client.cli.output import Output
from orbit_client.cli.timefmt import ago, duration, stamp
from orbit_client.errors import CertificateError, OrbitApiError, ServerUnreachable
from orbit_host.credentials import (
    Credentials,
    CredentialsFileError,
    load_credentials,
    write_credentials,
)
from orbit_wire.errors import ErrorCode

NOW = 1_796_180_409_313


def text_of(renderable: object, width: int = 160) -> str:
    sink = io.StringIO()
    Console(file=sink, width=width, color_system=None).print(renderable)
    return sink.getvalue()


def test_durations_read_like_people_write_them() -> None:
    assert duration(None) == "-"
    assert duration(0) == "0 ms"
    assert duration(850) == "850 ms"
    assert duration(3210) == "3.2 s"
    assert duration(45_000) == "45 s"
    assert duration(250_000) == "4 min 10 s"
    assert duration(3_600_000) == "1 h"
    assert duration(2 * 3_600_000 + 5 * 60_000) == "2 h 5 min"
    assert duration(3 * 86_400_000 + 4 * 3_600_000 + 59_000) == "3 d 4 h"


def test_relative_instants() -> None:
    assert ago(None, NOW) == "-"
    assert ago(NOW - 400, NOW) == "just now"
    assert ago(NOW - 5_000, NOW) == "5 s ago"
    assert ago(NOW - 125_000, NOW) == "2 min 5 s ago"
    assert ago(NOW + 86_400_000 - 60_000, NOW) == "in 23 h 59 min"


@given(st.integers(min_value=-(10**12), max_value=10**13))
def test_stamp_agrees_with_datetime(at_ms: int) -> None:
    expected = datetime.fromtimestamp(at_ms // 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    assert stamp(at_ms) == expected


def test_each_settled_state_has_its_own_exit_code() -> None:
    codes = {state: exits.exit_code_for_state(state)
             for state in ("SUCCEEDED", "FAILED", "NEEDS_REVIEW", "CANCELLED", "PENDING",
                           "RUNNING")}
    assert codes["SUCCEEDED"] == 0
    assert codes["PENDING"] == codes["RUNNING"] == exits.EXIT_WAIT_ENDED
    settled = [codes[s] for s in ("SUCCEEDED", "FAILED", "NEEDS_REVIEW", "CANCELLED")]
    assert len(set(settled) | {exits.EXIT_WAIT_ENDED}) == 5
    others = {exits.EXIT_API, exits.EXIT_USAGE, exits.EXIT_CREDENTIALS, exits.EXIT_UNREACHABLE,
              exits.EXIT_CERTIFICATE}
    assert not others & set(codes.values())


TASK = {
    "id": "a" * 32, "queue_id": "b" * 32, "state": "NEEDS_REVIEW",
    "capability": {"handler": "text.normalize", "handler_version": "v1",
                   "payload_version": "v1"},
    "policy": {"idempotency": "NON_IDEMPOTENT", "max_attempts": 3},
    "created_at_ms": NOW - 65_000, "updated_at_ms": NOW - 5_000, "attempts": 1,
    "result": None, "failure": None, "cancel_requested": False,
}
ATTEMPT = {
    "attempt_number": 1, "instance_id": "c" * 32, "child_pid": 4321, "state": "FINISHED",
    "reserved_at_ms": NOW - 64_000, "started_at_ms": NOW - 63_000,
    "finished_at_ms": NOW - 5_000, "outcome": "UNKNOWN", "code": "LEASE_EXPIRED",
    "kill_reason": "LEASE_EXPIRED", "signal": 9, "cpu_ms": 57_000,
    "peak_rss_bytes": 120 * 1024 * 1024, "decision": "NEEDS_REVIEW",
    "decision_rule": "unknown_outcome_non_idempotent",
}


def test_task_summary_tells_the_last_attempts_story() -> None:
    text = text_of(render.task_summary(TASK, ATTEMPT, NOW))
    assert f"Task {'a' * 32}  NEEDS_REVIEW" in text
    assert "text.normalize v1 · payload v1" in text
    assert "1 min 5 s ago" in text
    assert "orbit tasks review" in text
    assert "#1 on worker " + "c" * 32 + " (pid 4321)" in text
    assert "ran 58 s" in text and "ended UNKNOWN (LEASE_EXPIRED)" in text
    assert "killed: lease expired" in text and "signal 9" in text
    assert "peak memory 120.0 MiB" in text
    assert "sent to review (the outcome is unknown and the task is not idempotent" in text
    assert "unknown_outcome_non_idempotent" not in text  # the rule in words


def test_summary_shows_the_exact_result_text_and_why_a_task_waits() -> None:
    done = {**TASK, "state": "SUCCEEDED", "result": {"v": 1.1}, "result_json": '{"v": 1.10}'}
    assert '{"v": 1.10}' in text_of(render.task_summary(done, None, NOW))
    waiting = {**TASK, "state": "PENDING", "attempts": 0,
               "waiting": {"reason": "NO_LIVE_WORKER", "capability": TASK["capability"],
                           "since": NOW - 120_000}}
    text = text_of(render.task_summary(waiting, None, NOW))
    assert "no live worker (text.normalize v1 · payload v1), since 2 min ago" in text
    line = render.progress_line(waiting, 1500, 10_000)
    assert line.startswith("PENDING · no attempt yet · 1.5 s of 10 s · no live worker")


def test_a_handler_exception_is_named_by_its_type() -> None:
    failed = {**ATTEMPT, "outcome": "UNKNOWN", "code": "HANDLER_ERROR", "kill_reason": None,
              "signal": None, "details": {"exception_type": "KeyError"}}
    assert "ended UNKNOWN (HANDLER_ERROR): KeyError" in render.attempt_story(failed, NOW)
    text = text_of(render.attempts_view({"attempts": [failed]}, NOW), 240)
    assert "UNKNOWN (HANDLER_ERROR): KeyError" in text
    task = {**TASK, "state": "FAILED",
            "failure": {"code": "HANDLER_ERROR", "details": {"exception_type": "KeyError"}}}
    assert "HANDLER_ERROR: KeyError (the traceback is in the worker's log)" in text_of(
        render.task_summary(task, failed, NOW))
    # With --report-exception-messages on the worker, the message's first line as well.
    told = {**TASK, "state": "NEEDS_REVIEW", "failure": {"code": "HANDLER_ERROR", "details": {
        "exception_type": "builtins.ValueError", "exception_message": "bad row 7"}}}
    assert "HANDLER_ERROR: builtins.ValueError: bad row 7 (the traceback" in text_of(
        render.task_summary(told, None, NOW))
    assert "HANDLER_ERROR: builtins.ValueError" in text_of(render.tasks_table([told], NOW), 240)


def test_a_handler_that_returned_none_shows_a_null_result() -> None:
    done = {**TASK, "state": "SUCCEEDED", "result": None, "result_json": None}
    rows = [line.split() for line in text_of(render.task_summary(done, None, NOW)).splitlines()]
    assert ["result", "null"] in rows
    running = {**TASK, "state": "RUNNING", "result": None}
    assert "result" not in [row[0] for row in
                            (line.split() for line in text_of(
                                render.task_summary(running, None, NOW)).splitlines()) if row]


def test_stats_and_attempts_tables() -> None:
    stats = {"queue_id": "b" * 32, "counts": {"PENDING": 2, "SUCCEEDED": 40},
             "running_attempts": 1, "oldest_pending_age_ms": 3_200, "later_field": {"x": 1}}
    text = text_of(render.stats_view(stats, NOW))
    rows = [line.split() for line in text.splitlines()]
    assert ["PENDING", "2"] in rows and ["SUCCEEDED", "40"] in rows
    assert "waiting 3.2 s" in text and 'later field       {"x":1}' in text
    text = text_of(render.attempts_view({"attempts": [ATTEMPT], "evidence": []}, NOW), 240)
    assert "UNKNOWN (LEASE_EXPIRED)" in text and "killed: lease expired, signal 9" in text
    assert "57 s" in text and "120.0 MiB" in text


def test_a_kill_says_when_it_came_against_the_lease_end() -> None:
    early = {**ATTEMPT, "kill_reason": "ATTEMPT_TIMEOUT", "kill_after_lease_end_ms": -70,
             "killed_at_ms": 1, "reap_ms": 20}
    assert "killed: attempt timeout, signal 9, 70 ms before the lease end" in (
        render.attempt_story(early, NOW))
    late = {**early, "kill_after_lease_end_ms": 12}
    text = text_of(render.attempts_view({"attempts": [late], "evidence": []}, NOW), 240)
    assert "12 ms after the lease end" in text
    never = {**ATTEMPT, "kill_reason": "LEASE_LOST", "child_pid": None, "signal": None,
             "kill_after_lease_end_ms": None}
    assert "the handler never ran" in render.attempt_story(never, NOW)


def test_list_tables_show_full_ids_and_why_tasks_wait() -> None:
    tasks = [
        {**TASK, "id": "1" * 32, "state": "FAILED", "failure": {"code": "HANDLER_ERROR"},
         "finished_at_ms": NOW - 2_000},
        {**TASK, "id": "2" * 32, "state": "PENDING", "attempts": 0,
         "waiting": {"reason": "NO_LIVE_WORKER", "capability": TASK["capability"],
                     "since": NOW - 30_000}},
    ]
    text = text_of(render.tasks_table(tasks, NOW), 200)
    assert "1" * 32 in text and "2" * 32 in text
    assert "HANDLER_ERROR" in text and "2 s ago" in text
    assert "no live worker, since 30 s ago" in text
    assert text_of(render.tasks_table([], NOW)).strip() == "No tasks match."

    queues = [{"queue_id": "b" * 32, "name": "demo", "created_at": NOW - 3_600_000,
               "counts": {"PENDING": 3, "NEEDS_REVIEW": 2}}]
    text = text_of(render.queues_table(queues, NOW), 200)
    assert "b" * 32 in text and "demo" in text and "1 h ago" in text
    header, row = text.splitlines()[:2]
    assert header.split()[3:] == ["PENDING", "RUNNING", "NEEDS_REVIEW", "SUCCEEDED", "FAILED",
                                  "CANCELLED"]
    assert row.split()[-6:] == ["3", "0", "2", "0", "0", "0"]


def test_workers_view_lists_what_each_runs() -> None:
    workers = [{
        "instance_id": "c" * 32, "queue_id": "b" * 32, "replica": "127.0.0.1:8080",
        "version": "orbit-supervise/0.1.0", "capabilities": [TASK["capability"]], "slots": 8,
        "credit": 6, "connected_at": NOW - 600_000, "last_heartbeat_at": NOW - 1_500,
        "running": [{"task_id": "d" * 32, "attempt_id": "e" * 32, "child_pid": 4321,
                     "running_ms": 12_500}],
    }]
    text = text_of(render.workers_view(workers, NOW), 260)
    assert "c" * 32 in text and "127.0.0.1:8080" in text and "orbit-supervise/0.1.0" in text
    assert "text.normalize v1/v1" in text and "10 min ago" in text and "1 s ago" in text
    assert "Running attempts" in text and "d" * 32 in text and "4321" in text
    assert "12 s" in text
    assert text_of(render.workers_view([], NOW)).strip() == "No live workers."


def test_labels_show_on_workers_and_on_the_tasks_that_require_them() -> None:
    worker = {"instance_id": "c" * 32, "queue_id": "b" * 32, "capabilities": [],
              "labels": {"mem": "64G", "gpu": "a100"}, "slots": 2, "credit": 2, "running": []}
    assert "gpu=a100,mem=64G" in text_of(render.workers_view([worker], NOW), 260)
    plain = text_of(render.workers_view([{**worker, "labels": {}}], NOW), 260)
    assert "gpu=" not in plain
    policy = {**TASK["policy"], "requires": {"gpu": "h100"}}
    waiting = {**TASK, "state": "PENDING", "attempts": 0, "policy": policy,
               "waiting": {"reason": "NO_MATCHING_WORKER", "capability": TASK["capability"],
                           "requires": {"gpu": "h100"}, "since": NOW - 60_000}}
    text = text_of(render.task_summary(waiting, None, NOW))
    assert "requires" in text and "gpu=h100" in text
    assert "no matching worker (text.normalize v1 · payload v1) requires gpu=h100" in text
    assert "no live worker has these labels" in text


WORKER = {
    "instance_id": "c" * 32, "queue_id": "b" * 32, "replica": "orbit-replica-7.internal:8080",
    "version": "orbit-supervise/0.1.0",
    "capabilities": [{"handler": f"text.step{i}", "handler_version": "v1",
                      "payload_version": "v1"} for i in range(6)],
    "slots": 8, "credit": 6, "connected_at": NOW - 600_000, "last_heartbeat_at": NOW - 1_500,
    "running": [{"task_id": "d" * 32, "attempt_id": "e" * 32, "child_pid": 4321,
                 "running_ms": 12_500}],
}


@pytest.mark.parametrize("width", [60, 100, 130, 200])
def test_ids_are_never_cut_whatever_the_terminal_width(width: int) -> None:
    sink = io.StringIO()
    out = Output(True, Console(file=sink, width=width, color_system=None))
    out.show(render.workers_view([WORKER], NOW))
    out.show(render.credentials_table([CREDENTIAL], NOW))
    out.show(render.queues_table([{"queue_id": "b" * 32, "name": "a rather long name",
                                   "created_at": NOW, "counts": {}}], NOW))
    text = sink.getvalue()
    for ident in ("b", "c", "d", "e", "f", "9"):
        assert ident * 32 in text, (width, text)


CREDENTIAL = {"credential_id": "f" * 32, "name": "ci producer", "role": "producer",
              "queues": ["b" * 32, "9" * 32], "created_at_ms": NOW - 86_400_000,
              "last_used_at_ms": None, "expires_at_ms": NOW + 3_600_000,
              "revoked_at_ms": NOW - 60_000, "previous_secret_until_ms": None}


def test_credentials_table_says_who_may_do_what_without_secrets() -> None:
    admin = {**CREDENTIAL, "credential_id": "a" * 32, "role": "admin", "queues": [],
             "name": None, "revoked_at_ms": None, "expires_at_ms": None,
             "last_used_at_ms": NOW - 5_000}
    text = text_of(render.credentials_table([CREDENTIAL, admin], NOW), 250)
    assert "f" * 32 in text and "ci producer" in text and "every queue" in text
    assert "never" in text and "in 1 h" in text and "1 min ago" in text and "5 s ago" in text
    assert text_of(render.credentials_table([], NOW)).strip() == "No credentials."


def test_every_list_command_takes_json() -> None:
    def lists(group: click.Group) -> list[click.Command]:
        found = []
        for command in group.commands.values():
            if isinstance(command, click.Group):
                found += lists(command)
            elif command.name == "list":
                found.append(command)
        return found

    found = lists(cli)
    assert len(found) >= 5  # tasks, queues, workers, credentials, schedules
    for command in found:
        assert "--json" in [o for p in command.params for o in p.opts], command


def test_stats_show_pending_per_capability_beside_live_workers() -> None:
    stats = {"queue_id": "b" * 32, "counts": {"PENDING": 4}, "running_attempts": 0,
             "oldest_pending_age_ms": 60_000, "capabilities": [
                 {"capability": TASK["capability"], "pending": 4, "live_workers": 0,
                  "waiting": {"reason": "NO_LIVE_WORKER", "since": NOW - 60_000}}]}
    rows = [line.split() for line in text_of(render.stats_view(stats, NOW), 200).splitlines()]
    assert ["text.normalize", "v1", "·", "payload", "v1", "4", "0", "no", "live", "worker,",
            "since", "1", "min", "ago"] in rows


def test_time_filters_accept_relative_iso_and_epoch_times() -> None:
    assert parse_instant("15m", NOW, "--x") == NOW - 15 * 60_000
    assert parse_instant("2h", NOW, "--x") == NOW - 2 * 3_600_000
    assert parse_instant("1w", NOW, "--x") == NOW - 7 * 86_400_000
    assert parse_instant("1796180409313", NOW, "--x") == 1_796_180_409_313
    assert parse_instant("2026-12-02", NOW, "--x") == 1_796_169_600_000
    assert parse_instant("2026-12-02T01:00+01:00", NOW, "--x") == 1_796_169_600_000
    with pytest.raises(click.BadParameter, match="is not a time"):
        parse_instant("yesterday", NOW, "--created-after")


def test_a_cancelled_attempt_says_which_ended_it() -> None:
    stopped = {**ATTEMPT, "outcome": "SUCCEEDED", "code": None, "kill_reason": None,
               "signal": None, "ended_by": "COOPERATIVE"}
    assert "stopped by itself on cancel" in render.attempt_story(stopped, NOW)
    assert "stopped by itself on cancel" in text_of(
        render.attempts_view({"attempts": [stopped]}, NOW), 240)
    # A lease kill inside the grace: the kill reason alone would not say a cancel came first.
    lease = {**ATTEMPT, "kill_reason": "LEASE_LOST", "ended_by": "KILLED"}
    assert "cancelled, then killed" in render.attempt_story(lease, NOW)
    cancel = {**ATTEMPT, "kill_reason": "TASK_CANCELLED", "ended_by": "KILLED"}
    assert "killed: task cancelled" in render.attempt_story(cancel, NOW)


def test_the_summary_names_the_last_attempt_the_priority_and_the_next_attempt() -> None:
    text = text_of(render.task_summary(TASK, ATTEMPT, NOW))
    assert "last attempt  #1 on worker" in text
    assert "an operator decides" in text  # the review rule, in words
    later = {**TASK, "state": "PENDING", "attempts": 0, "priority": 9,
             "next_attempt_at_ms": NOW + 3_600_000}
    rows = [line.split() for line in text_of(render.task_summary(later, None, NOW)).splitlines()]
    assert ["priority", "9"] in rows and ["next", "attempt", "in", "1", "h"] in rows
    assert ["priority", "5"] not in [r[:2] for r in text_of(  # the default goes unsaid
        render.task_summary({**later, "priority": 5}, None, NOW)).splitlines()]


def test_a_task_nobody_serves_points_at_the_workers_list() -> None:
    waiting = {**TASK, "state": "PENDING", "attempts": 0,
               "waiting": {"reason": "NO_LIVE_WORKER", "capability": TASK["capability"],
                           "since": NOW - 1_000}}
    text = text_of(render.task_summary(waiting, None, NOW))
    assert "check the handler and versions against `orbit workers list`" in text


def test_stats_attempts_and_audit_views_have_their_heads() -> None:
    stats = {"queue_id": "b" * 32, "counts": {"SUCCEEDED": 1}, "running_attempts": 0}
    assert text_of(render.stats_view(stats, NOW)).startswith(f"Queue {'b' * 32}")
    header = text_of(render.attempts_view({"attempts": [ATTEMPT]}, NOW), 240).splitlines()[0]
    assert header.split() == ["#", "worker", "pid", "started", "ran", "progress", "outcome",
                              "how", "cpu", "memory", "then"]
    events = [{"at_ms": NOW - 2_000, "actor": "producer:" + "d" * 32, "kind": "task_submitted",
               "from_state": None, "to_state": "PENDING", "detail": None},
              {"at_ms": NOW - 1_000, "actor": "worker:" + "c" * 32, "kind": "attempt_finished",
               "from_state": "RUNNING", "to_state": "SUCCEEDED", "detail": {"outcome": "x"}}]
    text = text_of(render.audit_view(events, NOW), 240)
    assert "task submitted" in text and "· → PENDING" in text
    assert "RUNNING → SUCCEEDED" in text and '{"outcome":"x"}' in text
    assert text_of(render.audit_view([], NOW)).strip() == "No events."


URL = "http://127.0.0.1:9"


def test_error_lines_say_what_to_do_next(tmp_path: Path) -> None:
    down = error_line(ServerUnreachable(f"no answer from {URL}: ConnectError"), URL)
    assert down.startswith(f"orbit: UNAVAILABLE: no answer from {URL}: ConnectError; ")
    assert f"is orbit-server running at {URL}?" in down
    slow = error_line(ServerUnreachable(f"no answer from {URL}: ReadTimeout"), URL)
    assert "did not answer in time" in slow and "raise --timeout" in slow
    untrusted = error_line(CertificateError(f"the TLS certificate of {URL} was refused"), URL)
    assert "--ca-file" in untrusted
    lost = error_line(OrbitApiError(ErrorCode.NOT_FOUND, "no such task", status=404), URL)
    assert lost.endswith("; check the ID (`orbit tasks list` finds tasks), and that your "
                         "credential may use its queue")
    refused = OrbitApiError(ErrorCode.CONFLICT, "task in state CANCELLED", status=409)
    assert error_line(refused, URL, "task x: ") == "orbit: CONFLICT: task x: task in state " \
                                                   "CANCELLED"
    # The credentials file: missing, or malformed, and how to get a good one.
    with pytest.raises(CredentialsFileError) as missing:
        load_credentials(tmp_path / "nope.json")
    line = error_line(missing.value, None)
    assert line.startswith("orbit: BAD_REQUEST: ") and "does not exist" in line
    assert "orbit credentials create" in line
    bad = tmp_path / "bad.json"
    bad.write_text('{"url": "ftp://x", "credential_id": "short", "secret": "s"}')
    bad.chmod(0o600)
    with pytest.raises(CredentialsFileError) as malformed:
        load_credentials(bad)
    line = error_line(malformed.value, None)
    assert "'url' must be an http(s) URL" in line and "fix the file, or get a new one" in line


def test_usage_errors_name_what_is_missing(tmp_path: Path) -> None:
    """Refused before anything is sent (no server here): exit code 2 and the option."""
    admin = tmp_path / "admin.json"
    write_credentials(admin, Credentials(URL, "a" * 32, "secret", "admin", ()))

    def usage(*args: str) -> str:
        done = CliRunner().invoke(cli, ["--credentials-file", str(admin), *args])
        assert done.exit_code == 2, done.output
        return done.output

    assert "choose exactly one of --retry, --succeed, --fail" in usage(
        "tasks", "review", "f" * 32)
    assert "--queue is needed" in usage("tasks", "submit", "--handler", "h",
                                        "--handler-version", "v1", "--payload-version", "v1",
                                        "--payload", "{}")
    text = usage("tasks", "list", "--queue", "b" * 32, "--state", "DONE")
    assert "--state" in text and "'DONE' is not one of" in text
    assert "is not a time" in usage("tasks", "list", "--created-after", "yesterday")


def test_the_summary_says_where_the_policy_came_from() -> None:
    declared = {**TASK, "policy": {"idempotency": "IDEMPOTENT", "max_attempts": 3,
                                   "attempt_timeout_ms": 30_000},
                "policy_source": "registered"}
    rows = [line.split() for line in text_of(render.task_summary(declared, None, NOW)).splitlines()]
    assert ["policy", "attempt", "timeout", "30", "s", "·", "registered", "(declared", "by",
            "its", "worker's", "TaskType)"] in rows
    older = text_of(render.task_summary({**TASK, "policy_source": None}, None, NOW))
    assert ["policy", "attempt", "timeout", "-"] in [  # made before the source was kept
        line.split() for line in older.splitlines()]


def test_the_capabilities_view_shows_each_declared_policy() -> None:
    answer = {"queue_id": "b" * 32, "capabilities": [
        {"capability": TASK["capability"], "registered_at_ms": NOW - 120_000,
         "declared_at_ms": NOW - 120_000,
         "policy": {"idempotency": "IDEMPOTENT", "attempt_timeout_ms": 30_000}},
        {"capability": {"handler": "text.normalize", "handler_version": "v2",
                        "payload_version": "v1"},
         "registered_at_ms": NOW - 1_000, "declared_at_ms": None, "policy": {}}]}
    text = text_of(render.registered_view(answer, NOW))
    assert "idempotency IDEMPOTENT, attempt_timeout_ms 30000" in text
    assert "none (server defaults)" in text and "2 min ago" in text
    empty = text_of(render.registered_view({"capabilities": []}, NOW))
    assert empty.startswith("No capability registered")


def test_progress_shows_as_a_percentage_with_its_details_and_the_checkpoint() -> None:
    running = {"id": "a" * 32, "attempt_number": 2, "state": "RUNNING",
               "started_at_ms": NOW - 60_000, "lease_expires_at_ms": NOW + 20_000,
               "progress": {"fraction": 0.425, "details": {"row": 425}, "at_ms": NOW - 2_000}}
    task = {"id": "t" * 32, "state": "RUNNING", "capability": {"handler": "h",
            "handler_version": "1", "payload_version": "1"}, "queue_id": "q" * 32,
            "created_at_ms": NOW - 90_000, "attempts": 2, "deadline_at_ms": NOW + 86_400_000,
            "policy": {"max_attempts": 3, "attempt_timeout_ms": 3_600_000,
                       "progress_timeout_ms": 30_000},
            "checkpoint": {"row": 300}}
    summary = text_of(render.task_summary(task, running, NOW), 200)
    assert "progress timeout 30 s" in summary
    assert '42% · {"row":425} · reported 2 s ago' in summary
    assert '{"row":300} (the next attempt\'s)' in summary
    table = text_of(render.attempts_view({"attempts": [running, {**running, "progress": None,
                                                                  "attempt_number": 1}]}, NOW), 240)
    rows = table.splitlines()
    assert rows[1].split()[0] == "2" and "42%" in rows[1].split()
    assert rows[2].split()[0] == "1" and "42%" not in rows[2]
    assert render.percent(None) == "-" and render.percent(1) == "100%"
