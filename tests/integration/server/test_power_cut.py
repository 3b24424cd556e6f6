"""A simulated power cut loses no acknowledged step (orbit_server/wal_sync.py).

The server runs on SQLite with ``synchronous=NORMAL`` and a thread that fdatasyncs the WAL;
every answer waits for the sync covering its commit. A power cut keeps what was synced and
loses the rest of the page cache. Simulated here: submits run one after another, each
answered task recorded; the server is SIGKILLed in the middle of them; the WAL is cut at the
last size the sync thread reported as on disk (its debug record, written before it lets any
answer go) and the WAL index is dropped, as after a reboot. The restarted server must hold
every task it had answered.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import httpx
from support.orbit_http import OrbitEnv, expect, http_client, task_spec
from support.server import ServerProcess
from support.waiting import UNIT, wait_until

SUBMITS_BEFORE_CUT = 150


def _last_synced_bytes(log: Path) -> int:
    synced = [json.loads(line)["wal_bytes"] for line in log.read_text().splitlines()
              if line.startswith("{") and '"wal_synced"' in line]
    assert synced, "the server logged no WAL sync"
    return int(synced[-1])


def _server(tmp_path: Path, *args: str) -> ServerProcess:
    """A server on a fresh SQLite file whose WAL syncs are logged (debug, JSON)."""
    return ServerProcess(tmp_path / "server", extra_args=(
        "--log-level", "debug", "--log-format", "json", "--no-access-log", *args)).start()


def test_power_cut_loses_no_answered_submit(tmp_path: Path) -> None:
    srv = _server(tmp_path)
    try:
        admin = srv.bootstrap_admin()
        with http_client(srv.url, admin.bearer) as admin_http:
            env = OrbitEnv(srv, admin, admin_http)
            queue = env.queue()
            producer = env.producer(queue)
            answered: list[str] = []
            stop = threading.Event()

            def submit_until_cut() -> None:
                for i in range(100_000):  # bounded; the cut ends it long before
                    if stop.is_set():
                        return
                    try:
                        made = producer.post(f"/v1/queues/{queue}/tasks",
                                             json=task_spec(payload={"i": i}))
                    except httpx.HTTPError:
                        return  # the server is gone: this submit was never answered
                    if made.status_code != 201:
                        return
                    answered.append(made.json()["id"])

            submitter = threading.Thread(target=submit_until_cut, daemon=True)
            submitter.start()
            wait_until(lambda: len(answered) >= SUBMITS_BEFORE_CUT, timeout=60 * UNIT,
                       what=f"{SUBMITS_BEFORE_CUT} answered submits")
            srv.kill()  # mid-stream: one submit is usually in flight
            stop.set()
            submitter.join(timeout=30 * UNIT)
            assert not submitter.is_alive()
            env.close()

        db = Path(srv.db_url.removeprefix("sqlite:///"))
        wal = Path(f"{db}-wal")
        synced = _last_synced_bytes(srv.log_path)
        assert wal.stat().st_size >= synced
        os.truncate(wal, synced)  # what the disk holds after the cut
        Path(f"{db}-shm").unlink(missing_ok=True)  # the WAL index is rebuilt from the WAL

        srv.start()
        with http_client(srv.url, admin.bearer) as admin_http:
            env = OrbitEnv(srv, admin, admin_http)
            for task_id in answered:
                expect(admin_http.get(f"/v1/tasks/{task_id}"), 200)
            env.close()
    finally:
        srv.stop()


def test_process_durability_syncs_within_its_period(tmp_path: Path) -> None:
    """``--durability process``: answers leave without waiting for a sync, and the WAL is
    still synced within about a second of a commit (its debug record says so)."""
    srv = _server(tmp_path, "--durability", "process")
    try:
        admin = srv.bootstrap_admin()
        with http_client(srv.url, admin.bearer) as admin_http:
            env = OrbitEnv(srv, admin, admin_http)
            queue = env.queue()
            producer = env.producer(queue)
            made = expect(producer.post(f"/v1/queues/{queue}/tasks", json=task_spec()), 201)
            db = Path(srv.db_url.removeprefix("sqlite:///"))
            size_after_submit = Path(f"{db}-wal").stat().st_size
            wait_until(lambda: '"wal_synced"' in srv.log_path.read_text()
                       and _last_synced_bytes(srv.log_path) >= size_after_submit,
                       timeout=10 * UNIT, what="a WAL sync covering the submit")
            expect(admin_http.get(f"/v1/tasks/{made['id']}"), 200)
            env.close()
    finally:
        srv.stop()
