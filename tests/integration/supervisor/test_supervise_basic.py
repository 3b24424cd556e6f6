"""orbit-supervise against a real server: run, drain, exit codes, errors before connecting."""

from __future__ import annotations

import signal

import orjson
from supervisor_support import SupEnv, attempts, submit, wait_task


def test_runs_tasks_and_drains_on_sigterm(sup_env: SupEnv) -> None:
    sup = sup_env.start(workers=2)
    ids = [submit(sup_env.producer, sup_env.queue_id, "upper", {"text": t})
           for t in ("hello orbit", "reusable worker", "durable result")]
    for task_id, want in zip(ids, ("HELLO ORBIT", "REUSABLE WORKER", "DURABLE RESULT"),
                             strict=True):
        task = wait_task(sup_env.producer, task_id)
        assert task["state"] == "SUCCEEDED" and task["result"] == {"text": want}
        (att,) = attempts(sup_env.producer, task_id)["attempts"]
        assert att["outcome"] == "SUCCEEDED" and att["child_pid"]
    sup.send(signal.SIGTERM)
    assert sup.wait(20) == 0
    log = sup.log()
    assert "drained started=3 confirmed=3 running=0" in log
    # Even at debug level the credential secret never reaches the log (hello carries it).
    secret = orjson.loads(sup_env.credentials_file.read_bytes())["secret"]
    assert "DEBUG" in log and secret not in log and secret[:12] not in log


def test_large_payloads_and_results_on_many_slots(sup_env: SupEnv) -> None:
    # 16 tasks of 200 KiB waiting when 16 slots connect, each answered with 200 KiB: one
    # frame for all of them would be over 3 MiB, beyond what either side accepts. The
    # server splits the reservations by payload bytes and the supervisor its finishes by
    # result bytes, so every frame fits and every task completes.
    text = "x" * (200 * 1024)
    ids = [submit(sup_env.producer, sup_env.queue_id, "upper", {"text": text})
           for _ in range(16)]
    sup = sup_env.start(workers=16)
    for task_id in ids:
        task = wait_task(sup_env.producer, task_id, timeout_s=60)
        assert task["state"] == "SUCCEEDED" and task["result"] == {"text": text.upper()}
    assert all(len(attempts(sup_env.producer, t)["attempts"]) == 1 for t in ids)
    log = sup.log()  # never cut off for a frame too large
    assert "connection lost" not in log and "event disconnected" not in log


def test_a_result_that_escaped_the_childs_check_ends_uncertain_at_the_server(
        sup_env: SupEnv) -> None:
    # The child checks a result against the value rules; the supervisor passes the text on
    # unparsed, and the server checks it again: a corrupted child cannot make a task
    # succeed with a result that breaks the rules.
    sup = sup_env.start(workers=1)
    for text in ('{"n":123456789012345678901234567890}', "[NaN]", "[" * 40 + "]" * 40):
        task_id = submit(sup_env.producer, sup_env.queue_id, "unchecked_result",
                         {"text": text}, max_attempts=1)
        task = wait_task(sup_env.producer, task_id)
        assert task["state"] == "NEEDS_REVIEW" and task["result"] is None, text
        (att,) = attempts(sup_env.producer, task_id)["attempts"]
        assert (att["outcome"], att["code"]) == ("UNKNOWN", "INVALID_HANDLER_RESULT"), text
    sup.send(signal.SIGTERM)
    assert sup.wait(20) == 0
