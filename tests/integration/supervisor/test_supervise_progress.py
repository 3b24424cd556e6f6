"""A handler's progress with real processes: a real server, ``orbit-supervise`` and its
children, the worker's frames read by a proxy on the way. Handlers that report progress
(sync and async) run fine; the renewals carry the latest progress, the finish what no
renewal carried; notes that break the rules are dropped and said, never fatal."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from supervisor_support import SupEnv, submit, wait_task
from support.proxy import TcpProxy
from support.ws_tap import OpTap


@pytest.fixture
def tap_proxy(sup_env: SupEnv) -> Iterator[tuple[OpTap, TcpProxy]]:
    tap = OpTap()  # loses nothing: only reads the ops
    with TcpProxy(sup_env.orbit.server.port, tap=tap) as proxy:
        yield tap, proxy


def _carried(tap: OpTap) -> list[tuple[str, dict[str, Any]]]:
    """(op, progress) of every renew and finish the server received that carried progress,
    in the order first sent (one task per test: every op is its attempt's)."""
    with tap._lock:
        ops = [sent[0] for sent in tap.received.values()]
    return [(str(op["op"]), op["progress"]) for op in ops
            if op.get("op") in ("renew", "finish") and op.get("progress") is not None]


@pytest.mark.parametrize("handler", ["reports_progress", "reports_progress_async"])
def test_progress_rides_the_renewals_and_the_finish(
        sup_env: SupEnv, tap_proxy: tuple[OpTap, TcpProxy], handler: str) -> None:
    tap, proxy = tap_proxy
    sup_env.start(workers=1, url=proxy.url)
    # A short lease: renewals every ~200 ms while the handler's 12 steps take ~1.2 s.
    task_id = submit(sup_env.producer, sup_env.queue_id, handler,
                     {"steps": 12, "step_s": 0.1}, lease_ttl_ms=600)
    task = wait_task(sup_env.producer, task_id)
    assert task["state"] == "SUCCEEDED", task
    assert task["result"]["steps"] == 12
    carried = _carried(tap)
    renewals = [p for op, p in carried if op == "renew"]
    assert renewals, carried  # some renewal carried progress (the handler ran ~6 renewals)
    for p in renewals:
        assert 0 < p["fraction"] <= 1 and json.loads(p["details_json"])["i"] >= 1
    # Whatever went last is the handler's last note: a renewal or the finish carried it.
    assert carried[-1][1] == {"fraction": 1.0, "details_json": '{"i":12}'}, carried
    # Each renewal carries news at most once: no two carry the same state.
    assert len({json.dumps(p, sort_keys=True) for p in renewals}) == len(renewals), renewals


def test_notes_breaking_the_rules_are_dropped_and_the_task_succeeds(
        sup_env: SupEnv, tap_proxy: tuple[OpTap, TcpProxy]) -> None:
    tap, proxy = tap_proxy
    sup = sup_env.start(workers=1, url=proxy.url)
    task_id = submit(sup_env.producer, sup_env.queue_id, "bad_progress", {})
    task = wait_task(sup_env.producer, task_id)
    assert task["state"] == "SUCCEEDED", task
    # Only the good note reaches the server.
    assert [p for _, p in _carried(tap)] == [
        {"fraction": 0.5, "details_json": '{"ok":true}'}]
    sup.wait_log("dropped a progress note")
    # Said once per attempt, not once per note.
    assert sup.log().count("dropped a progress note") == 1


def test_progress_alone_never_makes_a_request(
        sup_env: SupEnv, tap_proxy: tuple[OpTap, TcpProxy]) -> None:
    """A handler reporting every 5 ms for a second under the default lease (no renewal is
    due within it): the only request of the attempt is its finish, which carries the last
    progress."""
    tap, proxy = tap_proxy
    sup_env.start(workers=1, url=proxy.url)
    task_id = submit(sup_env.producer, sup_env.queue_id, "reports_progress",
                     {"steps": 200, "step_s": 0.005})
    task = wait_task(sup_env.producer, task_id)
    assert task["state"] == "SUCCEEDED", task
    assert tap.ops_of("renew") == {}
    (finish,) = tap.ops_of("finish").values()
    assert finish["progress"] == {"fraction": 1.0, "details_json": '{"i":200}'}
    requests = [s for s in tap.seen("request", "to_server")
                if any(op.get("op") != "claim" for op in s.message.get("ops", []))]
    assert len(requests) == 1, requests  # the finish's (its claim rides in it)
