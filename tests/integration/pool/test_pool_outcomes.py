"""Handler outcomes through a real template and real children: results, failures, errors."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import msgspec
import orjson
import pytest
from pool_support import FIXTURES, request, run, running_pool, wait_busy
from support.waiting import UNIT

from orbit_supervisor.pool import ChildOutcome
from orbit_wire.frames import Progress
from orbit_wire.model import Outcome

SECRET_TEXT = "s3cr3t-should-never-leave-the-child"


async def _one(handler: str, payload: object = None, **pool_kwargs: object) -> ChildOutcome:
    async with running_pool(1, **pool_kwargs) as pool:  # type: ignore[arg-type]
        return await pool.execute(request(handler, payload))


def test_sync_handler_sees_every_execution_field() -> None:
    req = request("echo", {"text": "hello", "n": [1, 2.5, None]})
    async def scenario() -> ChildOutcome:
        async with running_pool(1) as pool:
            return await pool.execute(req)
    out = run(scenario())
    assert out.outcome is Outcome.SUCCEEDED and out.code is None and not out.retryable
    assert orjson.loads(out.result_json or "") == {
        "payload": {"text": "hello", "n": [1, 2.5, None]}, "attempt_id": req.attempt_id,
        "task_id": req.task_id, "epoch": 3, "attempt_number": 2, "capability": "echo@1/1",
        "idempotency": "IDEMPOTENT", "deadline_at_ms": 1_900_000_000_000,
    }
    assert out.details_json is None
    assert out.report.child_pid and out.report.cpu_ms is not None
    assert out.report.peak_rss_bytes and out.report.peak_rss_bytes > 1_000_000


def test_async_handler() -> None:
    out = run(_one("async_echo", {"k": "v"}))
    assert out.outcome is Outcome.SUCCEEDED
    assert orjson.loads(out.result_json or "") == {"async": True, "payload": {"k": "v"}}


def test_handler_module_is_imported_once_in_the_template() -> None:
    async def scenario() -> tuple[list[dict[str, int]], int | None, int]:
        async with running_pool(2) as pool:
            outs = [await pool.execute(request("whoami")) for _ in range(4)]
            assert pool.template_pid is not None
            template_policy = os.sched_getscheduler(pool.template_pid)
            return ([orjson.loads(o.result_json or "") for o in outs], pool.template_pid,
                    template_policy)
    results, template_pid, template_policy = run(scenario())
    assert {r["imported_in"] for r in results} == {template_pid}
    assert all(r["pid"] != template_pid for r in results)
    assert all(r["loaded"] == [] for r in results)  # no supervisor code in handler processes
    # Children run under SCHED_BATCH (they never preempt the parent that woke them); the
    # template and this process keep the default policy.
    assert {r["policy"] for r in results} == {os.SCHED_BATCH}
    assert template_policy == os.sched_getscheduler(0) == os.SCHED_OTHER
    # A pool made without child_nice keeps the children at this process's nice value.
    assert {r["nice"] for r in results} == {os.getpriority(os.PRIO_PROCESS, 0)}


def test_children_run_child_nice_steps_below_the_parent() -> None:
    async def scenario() -> tuple[dict[str, int], int]:
        async with running_pool(1, child_nice=7) as pool:
            out = await pool.execute(request("whoami"))
            assert pool.template_pid is not None
            return orjson.loads(out.result_json or ""), os.getpriority(os.PRIO_PROCESS,
                                                                       pool.template_pid)
    result, template_nice = run(scenario())
    mine = os.getpriority(os.PRIO_PROCESS, 0)
    assert result["nice"] == min(19, mine + 7)
    assert template_nice == mine  # only the children: the template forks replacements


@pytest.mark.parametrize(
    ("kind", "code", "retryable", "details"),
    [
        ("rejected", "OBJECT_REJECTED", False, {"field": "name", "n": 1}),
        ("temporary", "TEMPORARY_REJECTION", True, {}),
    ],
)
def test_worker_failure_is_an_explicit_failure(kind: str, code: str, retryable: bool,
                                               details: dict[str, object]) -> None:
    out = run(_one("fail", {"kind": kind}))
    assert out.outcome is Outcome.FAILED
    assert (out.code, out.retryable) == (code, retryable)
    assert out.details_json is not None and orjson.loads(out.details_json) == details
    assert out.result_json is None


@pytest.mark.parametrize(("kind", "exception_type"), [
    ("bad_code", None), ("bad_details", None), ("list_details", None),
    ("value_error", "builtins.ValueError"), ("system_exit", "builtins.SystemExit")])
def test_broken_failures_and_exceptions_are_handler_errors(kind: str,
                                                           exception_type: str | None) -> None:
    out = run(_one("fail", {"kind": kind}))
    assert (out.outcome, out.code, out.retryable) == (Outcome.UNKNOWN, "HANDLER_ERROR", False)
    assert out.result_json is None
    # An exception's type name is reported, never its message or traceback.
    expected = None if exception_type is None else {"exception_type": exception_type}
    assert (None if out.details_json is None else orjson.loads(out.details_json)) == expected
    assert SECRET_TEXT not in repr(out) and "Traceback" not in repr(out)


@pytest.mark.parametrize(("kind", "retryable", "exception_type"), [
    ("key_error", False, "builtins.KeyError"), ("timeout", True, "builtins.TimeoutError")])
def test_a_declared_exception_is_an_explicit_failure(kind: str, retryable: bool,
                                                      exception_type: str) -> None:
    out = run(_one("declared", {"kind": kind}))
    assert (out.outcome, out.code, out.retryable) == (Outcome.FAILED, "HANDLER_ERROR", retryable)
    assert orjson.loads(out.details_json or "") == {"exception_type": exception_type}
    assert SECRET_TEXT not in repr(out) and "Traceback" not in repr(out)
    # Not declared there: uncertain, as for any handler.
    other = run(_one("declared", {"kind": "value_error"}))
    assert (other.outcome, other.code) == (Outcome.UNKNOWN, "HANDLER_ERROR")


def test_an_exception_message_is_reported_only_when_the_pool_is_told() -> None:
    out = run(_one("declared", {"kind": "timeout"}, exception_messages=True))
    # The first line only: the secret on the second line stays in the worker's log.
    assert orjson.loads(out.details_json or "") == {"exception_type": "builtins.TimeoutError",
                                                    "exception_message": "upstream slow"}
    uncertain = run(_one("fail", {"kind": "value_error"}, exception_messages=True))
    assert orjson.loads(uncertain.details_json or "") == {
        "exception_type": "builtins.ValueError",
        "exception_message": f"database password is {SECRET_TEXT}"}


def test_a_handler_returning_none_succeeds_with_null() -> None:
    out = run(_one("bad_result", {"kind": "none"}))
    assert (out.outcome, out.code, out.result_json) == (Outcome.SUCCEEDED, None, "null")


def test_handler_error_keeps_the_child_and_the_next_task_runs() -> None:
    async def scenario() -> tuple[ChildOutcome, ChildOutcome, int]:
        async with running_pool(1) as pool:
            bad = await pool.execute(request("fail", {"kind": "value_error"}))
            good = await pool.execute(request("echo", {"x": 1}))
            return bad, good, pool.stats().crashed
    bad, good, crashed = run(scenario())
    assert bad.code == "HANDLER_ERROR" and good.outcome is Outcome.SUCCEEDED
    assert bad.report.child_pid == good.report.child_pid and crashed == 0


@pytest.mark.parametrize("kind", ["nan", "inf", "int64_overflow", "huge_int", "too_big",
                                  "too_deep", "not_json", "raw_big_int", "raw_invalid"])
def test_invalid_results_are_uncertain(kind: str) -> None:
    out = run(_one("bad_result", {"kind": kind}))
    assert (out.outcome, out.code) == (Outcome.UNKNOWN, "INVALID_HANDLER_RESULT")
    assert out.result_json is None


@pytest.mark.parametrize(
    ("kind", "text"),
    [
        ("raw_exact", '{"f":1.000000000000000000001,"i":9223372036854775807}'),
        ("decimal", '{"d":1.000000000000000000001}'),
        ("ok_max_int", '{"i":9223372036854775807,"neg":-9223372036854775808}'),
    ],
)
def test_exact_number_text_is_kept(kind: str, text: str) -> None:
    out = run(_one("bad_result", {"kind": kind}))
    assert out.outcome is Outcome.SUCCEEDED
    assert out.result_json == text


def test_a_forked_copy_of_the_child_cannot_answer() -> None:
    async def scenario() -> tuple[ChildOutcome, ChildOutcome]:
        async with running_pool(1) as pool:
            first = await pool.execute(request("fork_and_return"))
            second = await pool.execute(request("whoami"))
            return first, second
    first, second = run(scenario())
    assert first.outcome is Outcome.SUCCEEDED
    assert orjson.loads(first.result_json or "")["pid"] == first.report.child_pid
    assert second.outcome is Outcome.SUCCEEDED


def test_cooperative_cancel_reaches_the_handler() -> None:
    async def scenario() -> ChildOutcome:
        async with running_pool(1) as pool:
            req = request("cooperative")
            task = asyncio.create_task(pool.execute(req))
            await wait_busy(pool)
            assert pool.cancel(req)
            return await task
    out = run(scenario())
    assert (out.outcome, out.code, out.retryable) == (Outcome.FAILED, "STOPPED_EARLY", True)


def test_a_cancel_before_the_child_is_passed_on_with_the_run() -> None:
    # One child, busy with the first request: the second waits for it, and its cancel comes
    # meanwhile. The child it then gets is told right after the run frame.
    async def scenario() -> ChildOutcome:
        async with running_pool(1) as pool:
            first, second = request("cooperative"), request("cooperative")
            busy = asyncio.create_task(pool.execute(first))
            await wait_busy(pool)
            waiting = asyncio.create_task(pool.execute(second))
            await asyncio.sleep(0)
            assert not pool.cancel(second)  # no child runs it yet
            assert pool.cancel(first)
            await busy
            return await waiting
    out = run(scenario())
    assert (out.outcome, out.code) == (Outcome.FAILED, "STOPPED_EARLY")


def test_a_payload_larger_than_the_socket_buffer_arrives_whole() -> None:
    payload = {"blob": "é" * (120 * 1024), "n": 1}  # ~240 KiB of JSON, written in pieces
    out = run(_one("echo", payload))
    assert out.outcome is Outcome.SUCCEEDED
    assert orjson.loads(out.result_json or "")["payload"] == payload


_PRINTING_PARENT = """
import asyncio, sys
sys.path[:0] = sys.argv[1:4]
from pool_support import request
from orbit_supervisor.pool import ChildPool

async def main():
    pool = ChildPool("pool_printing:handlers", 2, max_tasks_per_child=2)
    await pool.start()
    try:
        for n in range(6):
            out = await pool.execute(request("shout", {"n": n}))
            assert out.outcome == "SUCCEEDED", out
    finally:
        await pool.close()

asyncio.run(main())
"""


def test_handler_output_is_neither_lost_nor_duplicated() -> None:
    here = str(Path(__file__).parent)
    # Block-buffered stdout, as in production behind a pipe: that is where a fork copies
    # unflushed output and a kill loses it.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    tests = str(Path(__file__).parents[2])  # pool_support imports support.waiting
    done = subprocess.run([sys.executable, "-c", _PRINTING_PARENT, str(FIXTURES), here, tests],
                          capture_output=True, text=True, timeout=60 * UNIT, env=env)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines.count("IMPORT-MARK") == 1
    assert sorted(line for line in lines if line.startswith("TASK-MARK")) == [
        f"TASK-MARK {n}" for n in range(6)]


def test_checkpoint_reaches_the_handler_and_its_last_progress_the_attempt() -> None:
    """The reservation's checkpoint is the handler's ``execution.checkpoint``; of a tight
    loop of notes the child sends few, and the last (sent before the answer) is what the
    attempt's record holds when its outcome is known."""
    att = request("progress_then_fail", {"notes": 500})
    att.reservation = msgspec.structs.replace(att.reservation, checkpoint={"i": 1000})
    first = request("progress_then_fail", {"notes": 3, "ok": True})

    async def scenario() -> tuple[ChildOutcome, ChildOutcome, int]:
        async with running_pool(1) as pool:
            ok = await pool.execute(first)
            before = pool.stats().messages_received
            out = await pool.execute(att)
            return ok, out, pool.stats().messages_received - before

    ok, out, received = run(scenario())
    # 500 calls within ~50 ms: a handful of notes (one per 50 ms, the last), and the answer.
    assert received <= 6, received
    assert orjson.loads(ok.result_json or "") == {"checkpoint": None}
    assert first.progress.latest == Progress(0.003, '{"i":3}')
    assert out.outcome is Outcome.FAILED and out.code == "STOPPED"
    assert orjson.loads(out.details_json or "") == {"at": 1500}
    # Resumed after its checkpoint, and its last note arrived before its answer.
    assert att.progress.latest == Progress(1.0, '{"i":1500}')
    assert att.progress.alive_at is not None


def test_bench_handlers_report_progress_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """scripts/bench_supervisor.py --progress-every-ms: the no-op reports once, the 10 ms
    task at its start and every N ms of its work."""
    monkeypatch.setenv("ORBIT_BENCH_PROGRESS_MS", "2")
    noop, cpu = request("noop"), request("cpu10")

    async def scenario() -> list[ChildOutcome]:
        async with running_pool(1, spec="supervisor_bench:handlers") as pool:
            return [await pool.execute(noop), await pool.execute(cpu)]

    outs = run(scenario())
    assert [o.outcome for o in outs] == [Outcome.SUCCEEDED] * 2
    assert noop.progress.latest == Progress(1.0, '{"done":1}')
    latest = cpu.progress.latest
    assert latest is not None and latest.fraction is not None and latest.fraction < 1.0
