"""`orbit limits` and `orbit tasks submit --limit`, run as the real command against a real
orbit-server: a limit set, replaced, listed, read with its usage and changes, deleted; a
producer may read but not set; bad patterns, rates and keys refused with typed errors; a
submitted task carries its keys and, held by a full limit, says so in its `waiting` fact."""

from __future__ import annotations

from pathlib import Path

from support.cli import Cli
from support.lanes import Lane
from support.orbit_http import OrbitEnv, expect
from support.protocol_client import ProtocolClient

from orbit_host.credentials import write_credentials
from orbit_wire.model import Capability

CAP = Capability("limits.h", "v1", "v1")


def _clis(orbit: OrbitEnv, tmp_path: Path) -> tuple[Lane, Cli, Cli]:
    lane = Lane.open(orbit, "limits")
    admin_file = tmp_path / "admin.json"
    write_credentials(admin_file, orbit.admin)
    return lane, Cli(admin_file), Cli.producer_of(lane, tmp_path)


def test_limits_round_trip_through_the_cli(orbit: OrbitEnv, tmp_path: Path) -> None:
    lane, admin, producer = _clis(orbit, tmp_path)
    q = ("--queue", lane.queue)
    made = admin.json("limits", "set", "licence:matlab", *q, "--max-running", "4")
    assert (made["pattern"], made["max_running"], made["created"]) == ("licence:matlab", 4, True)
    again = admin.json("limits", "set", "licence:matlab", *q, "--max-running", "2",
                       "--rate", "10/1s")
    assert (again["created"], again["max_running"], again["rate"]) == (
        False, 2, {"count": 10, "interval_ms": 1000})
    admin.json("limits", "set", "customer:*", *q, "--rate", "5/500ms")
    listed = producer.json("limits", "list", *q, "--json")["limits"]
    assert [(x["pattern"], x["wildcard"]) for x in listed] == [
        ("customer:*", True), ("licence:matlab", False)]
    human = producer.ok("--output", "human", "limits", "list", *q)
    assert "licence:matlab" in human and "5/500ms" in human
    one = producer.json("limits", "get", "licence:matlab", *q, "--json")
    assert one["usage"] == {"running": 0, "recent_starts": 0}
    assert [c["action"] for c in one["changes"]] == ["set", "set"]
    # A producer reads; only an admin sets or deletes.
    producer.fails("PERMISSION_DENIED", 1, "limits", "set", "x:y", *q, "--max-running", "1")
    # Refused before any request: a bad rate, no bound; by the server: a bad pattern.
    assert admin.run("limits", "set", "x:y", *q, "--rate", "ten").returncode == 2
    assert admin.run("limits", "set", "x:y", *q).returncode == 2
    admin.fails("BAD_REQUEST", 2, "limits", "set", "No-Colon", *q, "--max-running", "1")
    assert admin.json("limits", "delete", "customer:*", *q)["deleted"] is True
    admin.fails("NOT_FOUND", 1, "limits", "get", "customer:*", *q)


async def test_submit_with_keys_and_the_waiting_fact(orbit: OrbitEnv, tmp_path: Path) -> None:
    lane, admin, producer = _clis(orbit, tmp_path)
    q = ("--queue", lane.queue)
    submit = ("tasks", "submit", *q, "--handler", "limits.h", "--handler-version", "v1",
              "--payload-version", "v1", "--payload", "{}")
    task_id = producer.ok(*submit, "--limit", "gpu:a100", "--limit", "customer:7").strip()
    task = expect(lane.producer.get(f"/v1/tasks/{task_id}"), 200)
    assert task["limits"] == ["gpu:a100", "customer:7"]
    producer.fails("BAD_REQUEST", 1, *submit, "--limit", "gpu")
    # A limit of 1 with a task of its key open: the next task of the key is held, and its
    # waiting fact names the key and the limit.
    admin.json("limits", "set", "gpu:*", *q, "--max-running", "1")
    async with await ProtocolClient.connect(lane.ws_url) as worker:
        await worker.hello_as(lane.worker, capabilities=(CAP,), capacity=2)
        await worker.credit(2)
        (reserved,) = await worker.reservations(1)  # the first task: the key's one slot
        assert reserved.task_id == task_id
        held = producer.ok(*submit, "--limit", "gpu:a100").strip()
        waiting = expect(lane.producer.get(f"/v1/tasks/{held}"), 200)["waiting"]
        assert waiting is not None and waiting["reason"] == "LIMIT_FULL", waiting
        assert (waiting["key"], waiting["limit"], waiting["bound"], waiting["max"]) == (
            "gpu:a100", "gpu:*", "max_running", 1)
        shown = producer.ok("--output", "human", "tasks", "get", held)
        assert "limit full (gpu:a100: max_running 1 of gpu:*)" in shown, shown
        # Its slot freed (the attempt finished), the held task is reserved next.
        await worker.start(reserved)
        await worker.finish(reserved, "SUCCEEDED", result_json="1")
        (second,) = await worker.reservations(1)
        assert second.task_id == held
