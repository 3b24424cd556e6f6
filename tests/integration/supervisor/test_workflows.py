"""Workflows (docs/http-api.md "Workflows") served by real orbit-supervise processes over
the HTTP API, on both stores: results passed along a chain, a group, a chord whose callback
gets every member's result in declared order, failures cancelling descendants with their
cause (or an ``on_failure: "run"`` callback running once with the failure), a member in
review holding its callback until the review decides, a workflow cancelled mid-run, a
SIGKILLed supervisor, and a submit over the node limit refused whole."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from supervisor_support import SupEnv, spec
from support.orbit_http import expect
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
