"""The short form of every fault regression scenario (tests/support/fault_scenarios.py, the
code scripts/fault_report.py publishes docs/reports/fault-regression.md from): once each on
SQLite, the SIGKILL ones on MariaDB too, and the MariaDB-only ones (two replicas on one
database) there. Then the checks themselves must be able to fail: the invariant checker and
the frame tap are fed made-up facts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import websockets.frames
from support.fault_scenarios import SCENARIOS, Ctx, Server, run_scenario, scenario_server
from support.invariants import Journal, Run, TaskFacts, check
from support.ws_tap import FrameRule, FrameSplitter, Hold, OpTap

PLAIN = sorted(name for name, s in SCENARIOS.items() if not s.sigkill and "sqlite" in s.stores)
SIGKILL = sorted(name for name, s in SCENARIOS.items() if s.sigkill)
MARIADB_ONLY = sorted(name for name, s in SCENARIOS.items() if "sqlite" not in s.stores)
# One xdist worker runs the module, so the module-scoped shared_server starts once.
pytestmark = pytest.mark.xdist_group("fault_scenarios")


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One SQLite server for the scenarios that leave it running (each run has its own
    queue and credentials): starting a server per scenario would double their cost."""
    with scenario_server(Ctx(tmp_path_factory.mktemp("faults"), None, "sqlite")) as server:
        yield server


@pytest.mark.parametrize("name", PLAIN)
def test_fault_scenario_on_sqlite(name: str, tmp_path: Path, shared_server: Server) -> None:
    row = run_scenario(name, Ctx(tmp_path, None, "sqlite"), shared_server)
    assert row.ok, row.explain()


@pytest.mark.parametrize("name", SIGKILL)
def test_sigkill_scenario(name: str, tmp_path: Path, db_url: str, orbit_store: str,
                          request: pytest.FixtureRequest) -> None:
    # On SQLite the shared server serves these too (a restarted one comes back on its file).
    shared = request.getfixturevalue("shared_server") if orbit_store == "sqlite" else None
    row = run_scenario(name, Ctx(tmp_path, db_url, orbit_store), shared)
    assert row.ok, row.explain()


@pytest.mark.parametrize("name", MARIADB_ONLY)
def test_mariadb_only_scenario(name: str, tmp_path: Path, db_url: str, orbit_store: str
                               ) -> None:
    if orbit_store != "mariadb":
        pytest.skip("two servers share one database: MariaDB only")
    row = run_scenario(name, Ctx(tmp_path, db_url, orbit_store))
    assert row.ok, row.explain()


def _att(attempt_id: str, epoch: int = 1, outcome: str | None = "SUCCEEDED",
         started: int | None = 100, lease_end: int = 1000, finished: int | None = 500
         ) -> dict[str, Any]:
    return {"id": attempt_id, "epoch": epoch, "outcome": outcome, "started_at_ms": started,
            "lease_expires_at_ms": lease_end, "finished_at_ms": finished, "renewals": 0,
            "kill_reason": None}


def test_each_invariant_reports_its_violation() -> None:
    good_task = TaskFacts("t1", "IDEMPOTENT", "SUCCEEDED", [_att("a1")], {"r": 1}, 1)
    good = Journal([Run("t1", "a1", 200, 11)], {"a1": 400}, {"a1": {"r": 1}})
    assert check([good_task], good) == {name: [] for name in check([good_task], good)}

    def only(tasks: list[TaskFacts], journal: Journal) -> tuple[str, str]:
        found = [(name, v) for name, vs in check(tasks, journal).items() for v in vs]
        assert len(found) == 1, found
        return found[0]

    assert only([TaskFacts("t1", "IDEMPOTENT", None, [])], Journal([]))[0] == "one_state"
    assert only([TaskFacts("t1", "IDEMPOTENT", "NEEDS_REVIEW", [_att("a1", outcome="UNKNOWN")])],
                Journal([]))[0] == "one_state"
    twice = Journal([Run("t1", "a1", 200), Run("t1", "a1", 300)], {"a1": 400}, {"a1": {"r": 1}})
    assert only([good_task], twice)[0] == "ran_once"
    early = Journal([Run("t1", "a1", 50)], {"a1": 400}, {"a1": {"r": 1}})
    assert "confirmed start" in only([good_task], early)[1]
    late = Journal([Run("t1", "a1", 200)], {"a1": 1001}, {"a1": {"r": 1}})
    assert "past its lease" in only([good_task], late)[1]
    retried = TaskFacts("t2", "IDEMPOTENT", "SUCCEEDED",
                        [_att("a1", 1, "UNKNOWN", finished=None), _att("a2", 2, started=600)],
                        {"r": 2}, 2)
    overlap = Journal([Run("t2", "a1", 200), Run("t2", "a2", 700)], {"a1": 800, "a2": 900},
                      {"a2": {"r": 2}})
    assert "overlapped" in only([retried], overlap)[1]
    stale = TaskFacts("t3", "IDEMPOTENT", "SUCCEEDED",
                      [_att("a1", 1), _att("a2", 2, "UNKNOWN", started=600)], {"r": 1}, 2)
    both = Journal([Run("t3", "a1", 200)], {"a1": 400}, {"a1": {"r": 1}})
    assert only([stale], both)[0] == "no_stale"
    after_lease = TaskFacts("t1", "IDEMPOTENT", "SUCCEEDED", [_att("a1", finished=1200)],
                            {"r": 1}, 1)
    assert "after the lease" in only([after_lease], good)[1]
    wrong = TaskFacts("t1", "IDEMPOTENT", "SUCCEEDED", [_att("a1")], {"r": 2}, 1)
    assert only([wrong], good)[0] == "journal"


def test_the_tap_reads_masked_frames_and_loses_the_chosen_answer() -> None:
    request = b'{"type":"request","id":1,"ops":[{"op":"finish","msg_id":"m1"}]}'
    masked = websockets.frames.Frame(websockets.frames.Opcode.TEXT, request).serialize(
        mask=True, extensions=[])
    upgrade = b"GET /v1/worker HTTP/1.1\r\nHost: x\r\n\r\n"
    splitter = FrameSplitter(masked=True)
    data = upgrade + masked
    frames = [f for i in range(0, len(data), 7) for f in splitter.feed(data[i:i + 7])]
    assert [f.raw for f in frames] == [upgrade, masked]
    assert frames[1].message is not None and frames[1].message["ops"][0]["msg_id"] == "m1"
    tap = OpTap("finish", "answer")
    assert tap.decide("to_server", frames[1].message) == "forward"
    answer = {"type": "response", "id": 1, "results": [{"msg_id": "m1", "ok": True}]}
    assert tap.decide("to_client", answer) == "drop_and_cut"
    assert tap.decide("to_server", frames[1].message) == "forward"  # the resend goes through
    assert tap.decide("to_client", answer) == "forward"
    assert [op["msg_id"] for op in tap.lost_ops()] == ["m1"]
    assert len(tap.received["m1"]) == 2 and len(tap.answers["m1"]) == 2


def test_the_tap_drops_or_holds_the_frames_its_rules_name() -> None:
    reserve = {"type": "reserve", "basis": 3, "reservations": [{"attempt_id": "a1"}]}
    heartbeat = {"type": "heartbeat"}
    hold = Hold(2.0, "cut")
    tap = OpTap(rules=[FrameRule("reserve", "drop_and_cut")])
    late = tap.arm(FrameRule("heartbeat", hold, direction="to_server", times=2))
    assert tap.decide("to_client", reserve) == "drop_and_cut"
    assert tap.decide("to_client", reserve) == "forward"  # its one time is spent
    assert tap.decide("to_server", reserve) == "forward"  # another direction
    assert tap.decide("to_server", heartbeat) == hold
    assert tap.decide("to_server", heartbeat) == hold
    assert tap.decide("to_server", heartbeat) == "forward"
    assert late.hits == [heartbeat, heartbeat]
    # Every frame but heartbeats is kept with what was done to it.
    assert [(s.direction, s.verdict) for s in tap.seen("reserve")] == [
        ("to_client", "drop_and_cut"), ("to_client", "forward")]
    assert tap.seen("reserve", "to_server")[0].verdict == "forward"
    assert tap.seen("heartbeat", "to_server") == []
    with pytest.raises(AssertionError):
        FrameRule("response", "drop_and_cut")  # an op's loss is the tap's kind and lose


def test_the_tap_says_which_attempts_the_worker_spoke_of() -> None:
    tap = OpTap()
    request = {"type": "request", "id": 1, "ops": [
        {"op": "renew", "msg_id": "m1", "attempt_id": "a1", "epoch": 1},
        {"op": "resume", "msg_id": "m2", "attempts": [{"attempt_id": "a2", "epoch": 1}]},
        {"op": "claim", "msg_id": "m3", "count": 1}]}
    assert tap.decide("to_server", request) == "forward"
    assert tap.spoken_of() == {"a1", "a2"}
