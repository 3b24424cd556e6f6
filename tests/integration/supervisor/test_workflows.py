"""Workflows (docs/http-api.md "Workflows") served by real orbit-supervise processes over
the HTTP API, on both stores: results passed along a chain, a group, a chord whose callback
gets every member's result in declared order, failures cancelling descendants with their
cause (or an ``on_failure: "run"`` callback running once with the failure), a member in
review holding its callback until the review decides, a workflow cancelled mid-run, a
SIGKILLed supervisor, and a submit over the node limit refused whole."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import httpx
from supervisor_support import SupEnv, spec
from support.orbit_http import expect, expect_error
from support.waiting import wait_until


def node(key: str, name: str | None = None, parents: list[Any] | None = None,
         **payload: Any) -> dict[str, Any]:
    policy = payload.pop("policy", {})
    return {"key": key, "task": spec("collect", {"name": name or key, **payload}, **policy),
            "parents": parents or []}


def submit(producer: httpx.Client, queue_id: str, nodes: list[dict[str, Any]],
           **extra: Any) -> dict[str, Any]:
    return expect(producer.post(f"/v1/queues/{queue_id}/workflows",
                                json={"nodes": nodes, **extra}), 201)


def wait_workflow(producer: httpx.Client, workflow_id: str, states: tuple[str, ...] = (
        "SUCCEEDED", "FAILED", "CANCELLED"), timeout_s: float = 60.0) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    def ended() -> bool:
        view = expect(producer.get(f"/v1/workflows/{workflow_id}",
                                   params={"wait_ms": 2000}), 200)
        seen["view"] = view
        return view["state"] in states

    wait_until(ended, timeout=timeout_s, interval=0.05,
               what=lambda: f"workflow in {states}: {seen.get('view')}")
    return seen["view"]


def task(producer: httpx.Client, task_id: str) -> dict[str, Any]:
    return expect(producer.get(f"/v1/tasks/{task_id}"), 200)


def by_key(view: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n["key"]: n for n in view["nodes"]}


def runs(path: Path) -> list[str]:
    return path.read_text().split() [0::3] if path.exists() else []


def test_a_chain_of_three_passes_results_along(sup_env: SupEnv) -> None:
    sup_env.start(workers=2)
    made = submit(sup_env.producer, sup_env.queue_id, [
        node("a"), node("b", parents=["a"]), node("c", parents=["b"])], name="chain")
    assert made["name"] == "chain" and made["state"] == "RUNNING"
    assert [n["state"] for n in made["nodes"]] == ["PENDING", "WAITING", "WAITING"]
    done = wait_workflow(sup_env.producer, made["workflow_id"])
    assert done["state"] == "SUCCEEDED" and done["counts"]["SUCCEEDED"] == 3
    assert done["ended_at_ms"] is not None
    [listed] = expect(sup_env.producer.get(f"/v1/queues/{sup_env.queue_id}/workflows",
                                           params={"state": "SUCCEEDED"}), 200)["workflows"]
    assert listed["ended_at_ms"] == done["ended_at_ms"] and "nodes" not in listed
    assert expect(sup_env.producer.get(f"/v1/queues/{sup_env.queue_id}/workflows",
                                       params={"state": "RUNNING"}), 200)["workflows"] == []
    c = task(sup_env.producer, by_key(done)["c"]["task_id"])
    assert c["workflow_id"] == made["workflow_id"] and c["node_key"] == "c"
    [from_b] = c["result"]["parents"]
    assert (from_b["key"], from_b["state"]) == ("b", "SUCCEEDED")
    [from_a] = from_b["result"]["parents"]
    assert from_a["result"] == {"name": "a", "parents": []}


def test_a_chord_of_100_gives_its_callback_every_result_in_order(sup_env: SupEnv) -> None:
    sup_env.start(workers=4)
    members = [node(f"m{i}") for i in range(100)]
    keys = [m["key"] for m in members]
    made = submit(sup_env.producer, sup_env.queue_id, [*members, node("join", parents=keys)])
    done = wait_workflow(sup_env.producer, made["workflow_id"], timeout_s=120)
    assert done["state"] == "SUCCEEDED" and done["counts"]["SUCCEEDED"] == 101
    join = task(sup_env.producer, by_key(done)["join"]["task_id"])
    got = join["result"]["parents"]
    assert [p["key"] for p in got] == keys
    assert [p["result"]["name"] for p in got] == keys
    assert all(p["state"] == "SUCCEEDED" for p in got)


def test_a_group_of_100_runs_every_member_once(sup_env: SupEnv) -> None:
    sup_env.start(workers=4)
    log = sup_env.workdir / "group.log"
    made = submit(sup_env.producer, sup_env.queue_id,
                  [node(f"g{i}", path=str(log)) for i in range(100)])
    assert made["counts"]["PENDING"] == 100
    done = wait_workflow(sup_env.producer, made["workflow_id"], timeout_s=120)
    assert done["state"] == "SUCCEEDED" and done["counts"]["SUCCEEDED"] == 100
    assert sorted(runs(log)) == sorted(f"g{i}" for i in range(100))


def test_a_failed_member_cancels_its_descendants_and_an_on_failure_callback_runs_once(
        sup_env: SupEnv) -> None:
    sup_env.start(workers=2)
    log = sup_env.workdir / "fail.log"
    made = submit(sup_env.producer, sup_env.queue_id, [
        node("ok", path=str(log)), node("bad", fail=True, path=str(log)),
        node("after", parents=["ok", "bad"], path=str(log)),
        node("later", parents=["after"], path=str(log)),
        node("cleanup", parents=["ok", {"key": "bad", "on_failure": "run"}], path=str(log)),
    ])
    done = wait_workflow(sup_env.producer, made["workflow_id"])
    nodes = by_key(done)
    assert done["state"] == "FAILED"
    assert {k: n["state"] for k, n in nodes.items()} == {
        "ok": "SUCCEEDED", "bad": "FAILED", "after": "CANCELLED", "later": "CANCELLED",
        "cleanup": "SUCCEEDED"}
    assert nodes["after"]["cause"] == {"code": "PARENT_FAILED", "parent_key": "bad"}
    assert nodes["later"]["cause"] == {"code": "PARENT_FAILED", "parent_key": "after"}
    after = task(sup_env.producer, nodes["after"]["task_id"])
    assert after["failure"]["code"] == "PARENT_FAILED"
    assert after["failure"]["details"]["parent_key"] == "bad"
    assert after["attempts"] == 0
    events = expect(sup_env.producer.get(f"/v1/tasks/{after['id']}/audit"), 200)["events"]
    assert [e["detail"]["parent_key"] for e in events if e["kind"] == "task_cancelled"] == [
        "bad"]
    cleanup = task(sup_env.producer, nodes["cleanup"]["task_id"])
    got = {p["key"]: p for p in cleanup["result"]["parents"]}
    assert got["ok"]["state"] == "SUCCEEDED" and got["ok"]["result"]["name"] == "ok"
    assert got["bad"]["state"] == "FAILED" and got["bad"]["code"] == "BOOM"
    assert got["bad"]["details"] == {"name": "bad"} and got["bad"]["result"] is None
    assert sorted(runs(log)) == ["bad", "cleanup", "ok"]  # the callback ran once
    # An operator's retry runs the failed member again, alone: its cancelled descendants
    # stay cancelled, the callback is not run again, and they cannot be retried alone.
    expect_error(sup_env.producer.post(f"/v1/tasks/{after['id']}/retry", json={}), 409,
                 "CONFLICT")
    bad_id = nodes["bad"]["task_id"]
    expect(sup_env.producer.post(f"/v1/tasks/{bad_id}/retry", json={}), 200)
    wait_until(lambda: task(sup_env.producer, bad_id)["attempts"] == 2
               and task(sup_env.producer, bad_id)["state"] == "FAILED", timeout=30,
               what="the retried member failing again")
    again = by_key(wait_workflow(sup_env.producer, made["workflow_id"]))
    assert again["after"]["state"] == "CANCELLED" and again["later"]["state"] == "CANCELLED"
    assert sorted(runs(log)) == ["bad", "bad", "cleanup", "ok"]


def _review_member(sup_env: SupEnv) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """A chord whose member ``r`` crashes (uncertain, not idempotent: NEEDS_REVIEW)."""
    log = sup_env.workdir / "review.log"
    made = submit(sup_env.producer, sup_env.queue_id, [
        node("a", path=str(log)),
        {"key": "r", "task": spec("crash", {"kind": "exit3"}, max_attempts=1)},
        node("join", parents=["a", "r"], path=str(log)),
        node("tail", parents=["join"], path=str(log))])
    blocked = wait_workflow(sup_env.producer, made["workflow_id"], states=("BLOCKED",))
    nodes = by_key(blocked)
    assert nodes["r"]["state"] == "NEEDS_REVIEW"
    assert nodes["join"]["state"] == "WAITING" and nodes["join"]["blocked_by"] == "r"
    assert nodes["tail"]["blocked_by"] == "r"
    join = task(sup_env.producer, nodes["join"]["task_id"])
    assert join["waiting"]["reason"] == "BLOCKED_BY_REVIEW"
    assert join["waiting"]["parent_key"] == "r"
    return blocked, nodes


def test_a_member_in_review_holds_the_callback_until_a_review_succeeds_it(
        sup_env: SupEnv) -> None:
    sup_env.start(workers=2)
    blocked, nodes = _review_member(sup_env)
    expect(sup_env.producer.post(f"/v1/tasks/{nodes['r']['task_id']}/review",
                                 json={"action": "succeed", "result": {"fixed": 1}}), 200)
    done = wait_workflow(sup_env.producer, blocked["workflow_id"])
    assert done["state"] == "SUCCEEDED"
    join = task(sup_env.producer, by_key(done)["join"]["task_id"])
    assert [p["result"] for p in join["result"]["parents"]][1] == {"fixed": 1}


def test_a_member_in_review_failed_by_the_review_cancels_the_callback(
        sup_env: SupEnv) -> None:
    sup_env.start(workers=2)
    blocked, nodes = _review_member(sup_env)
    expect(sup_env.producer.post(f"/v1/tasks/{nodes['r']['task_id']}/review",
                                 json={"action": "fail", "reason": "lost"}), 200)
    done = wait_workflow(sup_env.producer, blocked["workflow_id"])
    assert done["state"] == "FAILED"
    after = by_key(done)
    assert after["join"]["state"] == "CANCELLED" and after["tail"]["state"] == "CANCELLED"
    assert after["join"]["cause"] == {"code": "PARENT_FAILED", "parent_key": "r"}
    assert runs(sup_env.workdir / "review.log") == ["a"]


def test_a_member_in_review_retried_keeps_the_callback_waiting(sup_env: SupEnv) -> None:
    sup_env.start(workers=2)
    blocked, nodes = _review_member(sup_env)
    # The retry crashes again: back in review, the callback still waits, blocked.
    expect(sup_env.producer.post(f"/v1/tasks/{nodes['r']['task_id']}/review",
                                 json={"action": "retry"}), 200)
    wait_until(lambda: task(sup_env.producer, nodes["r"]["task_id"])["attempts"] == 2,
               timeout=30, what="the retried attempt")
    again = wait_workflow(sup_env.producer, blocked["workflow_id"], states=("BLOCKED",))
    assert by_key(again)["join"]["state"] == "WAITING"
    assert by_key(again)["join"]["blocked_by"] == "r"
    assert runs(sup_env.workdir / "review.log") == ["a"]


def test_cancelling_a_workflow_mid_run_cancels_every_open_node(sup_env: SupEnv) -> None:
    sup_env.start(workers=2)
    made = submit(sup_env.producer, sup_env.queue_id, [
        node("slow", seconds=30), node("next", parents=["slow"]),
        node("last", parents=["next"])])
    slow_id = by_key(made)["slow"]["task_id"]
    wait_until(lambda: task(sup_env.producer, slow_id)["state"] == "RUNNING", timeout=20,
               what="the slow node running")
    cancelled = expect(sup_env.producer.post(
        f"/v1/workflows/{made['workflow_id']}/cancel", json={"reason": "enough"}), 200)
    assert cancelled["state"] == "CANCELLED"
    assert {n["state"] for n in cancelled["nodes"]} == {"CANCELLED"}
    # A node cancelled while it waited has no parents' results: it cannot run alone.
    expect_error(sup_env.producer.post(
        f"/v1/tasks/{by_key(made)['next']['task_id']}/retry", json={}), 409, "CONFLICT")
    # The running node's attempt is stopped through the normal cancel (its outcome lands).
    wait_until(lambda: not task(sup_env.producer, slow_id)["attempt_outcome_pending"],
               timeout=20, what="the cancelled attempt's outcome")
    [attempt] = expect(sup_env.producer.get(f"/v1/tasks/{slow_id}/attempts"), 200)["attempts"]
    assert attempt["state"] == "FINISHED"


def test_a_supervisor_killed_mid_workflow_ends_every_node_once(sup_env: SupEnv) -> None:
    log = sup_env.workdir / "kill.log"
    first = sup_env.start(workers=2)
    members = [node(f"m{i}", path=str(log), seconds=0.3,
                    policy={"idempotency": "IDEMPOTENT", "lease_ttl_ms": 2000})
               for i in range(10)]
    made = submit(sup_env.producer, sup_env.queue_id,
                  [*members, node("join", parents=[m["key"] for m in members], path=str(log))])
    wait_until(lambda: len(runs(log)) >= 3, timeout=20, what="a few members run")
    first.send(signal.SIGKILL)
    first.wait()
    sup_env.start(workers=2)
    done = wait_workflow(sup_env.producer, made["workflow_id"], timeout_s=90)
    assert done["state"] == "SUCCEEDED", done
    assert runs(log).count("join") == 1  # the callback ran once
    join = task(sup_env.producer, by_key(done)["join"]["task_id"])
    assert [p["key"] for p in join["result"]["parents"]] == [f"m{i}" for i in range(10)]


def test_a_workflow_over_the_node_limit_is_refused_whole(sup_env: SupEnv) -> None:
    producer = sup_env.producer
    nodes = [{"key": f"n{i}", "task": spec("collect", {})} for i in range(10_001)]
    error = expect_error(producer.post(f"/v1/queues/{sup_env.queue_id}/workflows",
                                       json={"nodes": nodes}), 400, "BAD_REQUEST")
    assert "10000" in error["message"]
    listed = expect(producer.get(f"/v1/queues/{sup_env.queue_id}/workflows"), 200)
    assert listed["workflows"] == []
    tasks = expect(producer.get(f"/v1/queues/{sup_env.queue_id}/tasks"), 200)
    assert tasks["tasks"] == []


def test_bad_graphs_are_refused_naming_the_node(sup_env: SupEnv) -> None:
    producer = sup_env.producer
    url = f"/v1/queues/{sup_env.queue_id}/workflows"
    for nodes, words in [
        ([node("a"), node("a")], "earlier node"),
        ([node("a", parents=["zz"])], "no node has the key"),
        ([node("a", parents=["b"]), node("b", parents=["a"])], "cycle"),
        ([node("a", parents=["a"])], "own parent"),
        ([{"key": "bad key", "task": spec("collect", {})}], "key"),
    ]:
        error = expect_error(producer.post(url, json={"nodes": nodes}), 400, "BAD_REQUEST")
        assert words in error["message"], error
    assert expect(producer.get(url), 200)["workflows"] == []


def test_an_operation_key_answers_the_workflow_it_made(sup_env: SupEnv) -> None:
    producer = sup_env.producer
    url = f"/v1/queues/{sup_env.queue_id}/workflows"
    body = {"nodes": [node("a")], "operation_key": "wf-1", "name": "once"}
    made = expect(producer.post(url, json=body), 201)
    again = expect(producer.post(url, json=body), 200)
    assert again["workflow_id"] == made["workflow_id"]
    listed = expect(producer.get(url), 200)["workflows"]
    assert [w["workflow_id"] for w in listed] == [made["workflow_id"]]
    assert "nodes" not in listed[0]
    # Pages, newest first, with a cursor; a cursor this list did not give is refused.
    newer = expect(producer.post(url, json={"nodes": [node("b")]}), 201)
    first = expect(producer.get(url, params={"limit": 1}), 200)
    assert [w["workflow_id"] for w in first["workflows"]] == [newer["workflow_id"]]
    second = expect(producer.get(url, params={"limit": 1, "cursor": first["next_cursor"]}),
                    200)
    assert [w["workflow_id"] for w in second["workflows"]] == [made["workflow_id"]]
    expect_error(producer.get(url, params={"cursor": "nope"}), 400, "BAD_REQUEST")


def test_a_schedule_fires_a_workflow(sup_env: SupEnv) -> None:
    sup_env.start(workers=2)
    producer = sup_env.producer
    made = expect(producer.post(f"/v1/queues/{sup_env.queue_id}/schedules", json={
        "cron": "* * * * * *", "with_seconds": True, "workflow": {
            "name": "nightly", "nodes": [node("a"), node("b", parents=["a"])]}}), 201)
    assert made["task"] is None and made["workflow"]["name"] == "nightly"
    wait_until(lambda: expect(producer.get(f"/v1/schedules/{made['id']}"), 200)["firings"],
               timeout=20, what="a firing")
    expect(producer.post(f"/v1/schedules/{made['id']}/pause"), 200)
    [firing, *_] = expect(producer.get(f"/v1/schedules/{made['id']}"), 200)["firings"]
    assert firing["task_id"] is None and firing["workflow_id"]
    done = wait_workflow(producer, firing["workflow_id"])
    assert done["state"] == "SUCCEEDED" and done["name"] == "nightly"
    b = task(producer, by_key(done)["b"]["task_id"])
    assert b["result"]["parents"][0]["result"]["name"] == "a"
    # A bad graph is refused when the schedule is created, as a submit would be.
    error = expect_error(producer.post(f"/v1/queues/{sup_env.queue_id}/schedules", json={
        "cron": "0 0 1 1 *", "workflow": {"nodes": [node("a", parents=["zz"])]}}),
        400, "BAD_REQUEST")
    assert "zz" in error["message"]
    expect_error(producer.post(f"/v1/queues/{sup_env.queue_id}/schedules", json={
        "cron": "0 0 1 1 *", "task": spec("collect", {}),
        "workflow": {"nodes": [node("a")]}}), 400, "BAD_REQUEST")
