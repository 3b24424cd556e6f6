"""Reconnects through a real TCP proxy: cut connections, a blackholed network, a server that
is not there yet. At most one execution per attempt; a dead network never extends a lease."""

from __future__ import annotations

import collections
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from supervisor_support import SupEnv, alive, attempts, submit, wait_pids, wait_task
from support.proxy import TcpProxy
from support.server import free_port
from support.waiting import UNIT, wait_until


@pytest.fixture
def proxy(sup_env: SupEnv) -> Iterator[TcpProxy]:
    with TcpProxy(sup_env.orbit.server.port) as p:
        yield p


def test_at_most_once_per_attempt_under_connection_cuts(sup_env: SupEnv, proxy: TcpProxy,
                                                        tmp_path: Path) -> None:
    sup = sup_env.start(workers=3, url=proxy.url)
    runs = tmp_path / "runs.txt"
    ids = [submit(sup_env.producer, sup_env.queue_id, "append",
                  {"path": str(runs), "seconds": 0.15}, idempotency="IDEMPOTENT",
                  max_attempts=5, lease_ttl_ms=3000,
                  backoff={"initial_ms": 10, "max_ms": 50, "multiplier": 2.0, "jitter": 0})
           for _ in range(12)]
    cuts = 0
    for _ in range(12):  # bounded: about 2.5 s of cuts while tasks run
        time.sleep(0.2 * UNIT)  # the scenario: a cut every 200 ms
        cuts += proxy.cut()
    assert cuts > 0
    states = [wait_task(sup_env.producer, t, timeout_s=40)["state"] for t in ids]
    assert states == ["SUCCEEDED"] * len(ids)
    lines = runs.read_text().split("\n")
    per_attempt = collections.Counter(line.split()[1] for line in lines if line)
    assert per_attempt and max(per_attempt.values()) == 1, per_attempt  # never twice
    instances = set()
    for task_id in ids:
        history = attempts(sup_env.producer, task_id)["attempts"]
        started = {a["id"] for a in history if a["started_at_ms"]}
        ran = {a for a in per_attempt if a in {h["id"] for h in history}}
        assert ran <= started  # nothing ran without a confirmed start
        instances |= {a["instance_id"] for a in history}
    assert len(instances) == 1  # one identity across every reconnect
    assert "connection lost" in sup.log()


def test_blackholed_network_kills_at_local_lease_expiry(sup_env: SupEnv, proxy: TcpProxy,
                                                        tmp_path: Path) -> None:
    sup = sup_env.start(workers=1, url=proxy.url)
    pid_file = tmp_path / "spin.pids"
    task_id = submit(sup_env.producer, sup_env.queue_id, "ignores_sigterm",
                     {"pid_file": str(pid_file)}, lease_ttl_ms=1000, max_attempts=1)
    pids = wait_pids(pid_file, "handler running")
    proxy.blackhole(True)
    cut_at = time.monotonic()
    # The last confirmed lease ends at most 1 s after the blackhole; killing takes < 2 s more.
    # Wait well past that, so that the bound below is what decides.
    wait_until(lambda: not alive(pids), timeout=20,
               what="processes killed while the network is dead")
    assert time.monotonic() - cut_at < 3.0 * UNIT
    task = wait_task(sup_env.producer, task_id, timeout_s=20)
    assert task["state"] == "NEEDS_REVIEW"
    # The supervisor notices the silent server by itself (session TTL 3 s) and reconnects.
    sup.wait_log("dropping the connection: SERVER_SILENT", timeout_s=10)
    proxy.blackhole(False)
    (att,) = wait_until(lambda: _reported(sup_env, task_id), timeout=20,
                        what="late report kept")["attempts"]
    assert (att["outcome"], att["code"]) == ("UNKNOWN", "LEASE_EXPIRED")
    nxt = submit(sup_env.producer, sup_env.queue_id, "upper", {"text": "back"})
    assert wait_task(sup_env.producer, nxt, timeout_s=20)["result"] == {"text": "BACK"}


def _reported(sup_env: SupEnv, task_id: str) -> dict[str, object] | None:
    history = attempts(sup_env.producer, task_id)
    evidence = history["evidence"]
    return history if any(e["code"] == "LEASE_LOST" for e in evidence) else None


def test_unreachable_server_at_start_is_retried(sup_env: SupEnv) -> None:
    port = free_port()
    sup = sup_env.start(workers=1, url=f"http://127.0.0.1:{port}",
                        extra=("--log-format", "json"))
    wait_until(lambda: sup.log().count("cannot reach") >= 2, timeout=10,
               what="two logged retries")
    assert sup.proc is not None and sup.proc.poll() is None
    records = [orjson.loads(line) for line in sup.log().splitlines() if line]
    assert {"ts", "level", "logger", "event", "message"} <= set(records[0])
    retries = [r for r in records if r["event"] == "connect_failed"]
    assert retries[0]["level"] == "WARNING" and retries[0]["attempt"] == 1, retries[0]
    assert "cannot reach" in retries[0]["message"] and retries[0]["reason"], retries[0]
    with TcpProxy(sup_env.orbit.server.port, port=port):
        task_id = submit(sup_env.producer, sup_env.queue_id, "upper", {"text": "late"})
        assert wait_task(sup_env.producer, task_id, timeout_s=20)["result"] == {"text": "LATE"}


def test_server_crash_and_restart_resumes_and_confirms(sup_env: SupEnv, tmp_path: Path) -> None:
    sup = sup_env.start(workers=2)
    runs = tmp_path / "runs.txt"
    ids = [submit(sup_env.producer, sup_env.queue_id, "append",
                  {"path": str(runs), "seconds": 1.5}, lease_ttl_ms=10000)
           for _ in range(2)]
    wait_until(lambda: runs.exists() and len(runs.read_text().split("\n")) >= 3, timeout=20,
               what="both running")
    sup_env.orbit.server.restart(crash=True)  # SIGKILL, same database and port
    for task_id in ids:
        assert wait_task(sup_env.producer, task_id, timeout_s=30)["state"] == "SUCCEEDED"
    per_attempt = collections.Counter(line.split()[1] for line in runs.read_text().split("\n")
                                      if line)
    assert sorted(per_attempt.values()) == [1, 1]  # each ran once; resumed, not rerun
    assert sup.proc is not None and sup.proc.poll() is None
    log = sup.log()
    assert "connection lost" in log and log.count("connected to") >= 2


def test_several_urls_fail_over_in_order(sup_env: SupEnv) -> None:
    # Two "replicas" of one server, each a proxy on a port of its own: A is down at the start.
    port_a = free_port()
    with TcpProxy(sup_env.orbit.server.port) as b:
        sup = sup_env.start(workers=1, extra=("--url", f"http://127.0.0.1:{port_a}",
                                               "--url", b.url))
        sup.wait_log(f"; next: ws://127.0.0.1:{b.port}/v1/worker")
        first = submit(sup_env.producer, sup_env.queue_id, "upper", {"text": "on b"})
        assert wait_task(sup_env.producer, first, timeout_s=20)["result"] == {"text": "ON B"}
        assert f"connected to ws://127.0.0.1:{b.port}/v1/worker" in sup.log()
        # B goes away for good and A comes up: B is tried again first, then A.
        with TcpProxy(sup_env.orbit.server.port, port=port_a):
            b.stop()
            sup.wait_log(f"connected to ws://127.0.0.1:{port_a}/v1/worker")
            second = submit(sup_env.producer, sup_env.queue_id, "upper", {"text": "on a"})
            assert wait_task(sup_env.producer, second, timeout_s=20)["result"] == {
                "text": "ON A"}
    log = sup.log()
    lost = log.index("connection lost")
    assert f"cannot reach ws://127.0.0.1:{b.port}/v1/worker" in log[lost:]
    assert sup.proc is not None and sup.proc.poll() is None
