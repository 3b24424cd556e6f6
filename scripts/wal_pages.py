#!/usr/bin/env python3
"""WAL pages written per transaction of one lone task, on a real SQLite file, through the
server's own use cases (services, in process, no HTTP), and the B-trees they belong to.

    .venv/bin/python scripts/wal_pages.py [--finished 20000] [--repeat 40] [--keep DIR]

First ``--finished`` tasks go through submit, reserve, start and finish in batches (real
transactions), so every table and index has the depth and the finished rows of a database
that has been serving for a while. Then, ``--repeat`` times, lone tasks go through each
transaction of ``KINDS``. The WAL is emptied before them and never checkpointed while they
run (``PRAGMA wal_autocheckpoint=0``), so a transaction's frames are the WAL file's growth
divided by (page size + 24); each frame's header names its page, and ``dbstat`` names the
table or index that page belongs to right after the commit (``page 1`` is the database
header, ``free`` a page on the freelist). A page appears once per commit however many of its
rows changed, so the frames count the B-tree pages a commit wrote.

It is deterministic (a fixed clock and seeds), not a timing benchmark: the figures do not
depend on the machine's load. docs/benchmarks.md ("WAL pages per transaction") records them.
"""

from __future__ import annotations

import argparse
import collections
import random
import sqlite3
import statistics
import struct
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sqlalchemy import event  # noqa: E402

from orbit_server.config import ServerConfig  # noqa: E402
from orbit_server.services import ClaimRoom, Services, WorkerBinding  # noqa: E402
from orbit_server.store import create_engine_for, migrate  # noqa: E402
from orbit_wire.frames import (  # noqa: E402
    ClaimOp,
    FinishOp,
    Hello,
    Op,
    RenewOp,
    Report,
    StartOp,
)
from orbit_wire.model import Capability, Outcome  # noqa: E402

CAP = Capability("bench.noop", "v1", "v1")
T0 = 1_800_000_000_000
BATCH = 250
ROOM = ClaimRoom(True, 8)
# The order the table lists the transactions in.
KINDS = ("submit", "reserve", "start", "renew", "finish", "submit+reserve", "finish+retry",
         "finish+claim", "cancel (pending)", "cancel (running)", "reaper expiry")


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now

    def tick(self, ms: int = 3) -> None:
        self.now += ms


def spec(i: int, **policy: Any) -> dict[str, Any]:
    return {"handler": CAP.handler, "handler_version": CAP.handler_version,
            "payload_version": CAP.payload_version, "payload": {"i": i},
            "idempotency": "IDEMPOTENT", **policy}


class Run:
    """The services on one SQLite file, a worker connection, and the WAL's frames."""

    def __init__(self, path: Path) -> None:
        url = f"sqlite:///{path}"
        migrate(url)
        self.engine = create_engine_for(url, synchronous="NORMAL")
        event.listen(self.engine, "connect", _no_autocheckpoint)
        self.wal = Path(f"{path}-wal")
        self.clock = Clock()
        config = ServerConfig(db_url=url)
        self.svc = Services(self.engine, config, self.clock, random.Random(7))
        made = self.svc.admin.bootstrap_admin("root")
        admin = self.svc.admin.authenticate(f"{made['credential_id']}.{made['secret']}")
        self.queue = self.svc.admin.create_queue(admin, "q")["id"]
        prod = self.svc.admin.create_credential(admin, "producer", [self.queue], "p")
        self.producer = self.svc.admin.authenticate(f"{prod['credential_id']}.{prod['secret']}")
        self.admin = admin
        work = self.svc.admin.create_credential(admin, "worker", [self.queue], "w")
        self.worker: WorkerBinding = self.svc.workers.worker_hello(Hello(
            credential_id=work["credential_id"], credential_secret=work["secret"],
            instance_id="0" * 31 + "1", instance_secret="instance-secret",
            queue_id=self.queue, capabilities=(CAP,), capacity=4))
        self.msgs = 0
        self.page_size = 0
        self.seen: dict[str, list[collections.Counter[str]]] = collections.defaultdict(list)

    # ------------------------------------------------------------------ the use cases

    def msg(self) -> str:
        self.msgs += 1
        return f"m{self.msgs}"

    def submit(self, *specs: dict[str, Any]) -> list[str]:
        made, _ = self.svc.tasks.submit(self.producer, self.queue, list(specs))
        return [view["id"] for view, _created in made]

    def ops(self, ops: list[Op], room: ClaimRoom | None = None) -> list[Any]:
        self.clock.tick()
        results, _ = self.svc.workers.apply_ops(self.worker, ops, *(() if room is None
                                                                     else (room,)))
        assert all(r.ok for r in results), results
        return results

    def start(self, attempt_id: str, epoch: int) -> None:
        self.ops([StartOp(self.msg(), attempt_id, epoch, 4242)])

    def finish(self, attempt_id: str, epoch: int, outcome: Outcome = Outcome.SUCCEEDED,
               **extra: Any) -> FinishOp:
        return FinishOp(self.msg(), attempt_id, epoch, outcome,
                        result_json="1" if outcome is Outcome.SUCCEEDED else None,
                        report=Report(exit_code=0, cpu_ms=1, peak_rss_bytes=1 << 20), **extra)

    def reserve(self, n: int = 1) -> list[tuple[str, int]]:
        self.clock.tick()
        return [(r.attempt_id, r.epoch) for r in self.svc.workers.reserve(self.worker, n)]

    def fill(self, finished: int) -> None:
        """``finished`` tasks submitted, reserved, started and finished in batches."""
        for start in range(0, finished, BATCH):
            self.clock.tick()
            self.submit(*(spec(i) for i in range(start, min(finished, start + BATCH))))
            got = self.reserve(BATCH)
            self.ops([StartOp(self.msg(), a, e, 4242) for a, e in got])
            self.ops([self.finish(a, e) for a, e in got])
        self.clock.tick(60_000)

    # ------------------------------------------------------------------ measuring

    def measure(self, kind: str, call: Callable[[], object]) -> None:
        before = self.wal.stat().st_size if self.wal.exists() else 0
        self.clock.tick()
        call()
        after = self.wal.stat().st_size
        frame = self.page_size + 24
        if before == 0:
            before = 32  # the WAL header
        with self.wal.open("rb") as f:
            f.seek(before)
            raw = f.read(after - before)
        assert len(raw) % frame == 0, "the WAL grew by whole frames"
        self.seen[kind].append(trees(self.wal.with_name(self.wal.name[:-4]),
                                     frame_pages(raw, self.page_size)))

    def checkpoint(self) -> None:
        """Copy the WAL into the database and empty it; note the page size."""
        conn = sqlite3.connect(self.wal.with_name(self.wal.name[:-4]))
        try:
            self.page_size = conn.execute("PRAGMA page_size").fetchone()[0]
            busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            assert busy == 0, "the checkpoint was blocked"
        finally:
            conn.close()

    def lone_task(self, base: int) -> None:
        """Each measured transaction once, on lone tasks (payloads from ``base``)."""
        m = self.measure
        # A task submitted while no worker waits, dispatched, started, renewed, finished.
        m("submit", lambda: self.submit(spec(base)))
        got: list[tuple[str, int]] = []
        m("reserve", lambda: got.extend(self.reserve()))
        (a, e), = got
        m("start", lambda: self.start(a, e))
        m("renew", lambda: self.ops([RenewOp(self.msg(), a, e)]))
        m("finish", lambda: self.ops([self.finish(a, e)]))
        # A submit that reserves for the waiting worker in its own transaction.
        made: list[Any] = []
        m("submit+reserve", lambda: made.extend(self.svc.tasks.submit_and_reserve(
            self.producer, self.queue, [spec(base + 1, max_attempts=3)], self.worker, 1)[2]))
        (res,) = made
        self.start(res.attempt_id, res.epoch)
        # A failure the policy retries: the task is PENDING again, after its backoff.
        m("finish+retry", lambda: self.ops([self.finish(
            res.attempt_id, res.epoch, Outcome.FAILED, code="E", retryable=True)]))
        self.clock.tick(60_000)
        (a2, e2), = self.reserve()
        self.start(a2, e2)
        # A finish whose request claims the next task (reserved and started at once).
        self.submit(spec(base + 2))
        m("finish+claim", lambda: self.ops([self.finish(a2, e2), ClaimOp(self.msg(), 1)], ROOM))
        (a3, e3), = self._running()
        # Cancels: a PENDING task, then the RUNNING one (its worker is told).
        (pending,) = self.submit(spec(base + 3))
        m("cancel (pending)", lambda: self.svc.tasks.cancel_task(self.producer, pending, None))
        m("cancel (running)", lambda: self.svc.tasks.cancel_task(
            self.producer, self._task_of(a3), None))
        self.ops([self.finish(a3, e3)])
        # A lease that lapsed: the reaper ends the attempt (UNKNOWN, retried later).
        self.submit(spec(base + 4, max_attempts=3))
        (a4, e4), = self.reserve()
        self.start(a4, e4)
        self.clock.tick(10 * 60_000)
        m("reaper expiry", self.svc.reaper.reap)
        self.clock.tick(60_000)
        (a5, e5), = self.reserve()
        self.start(a5, e5)
        self.ops([self.finish(a5, e5)])

    def _running(self) -> list[tuple[str, int]]:
        with self.engine.connect() as conn:
            rows = conn.exec_driver_sql(
                "SELECT id, epoch FROM attempts WHERE state = 'RUNNING'").all()
        return [(r[0], r[1]) for r in rows]

    def _task_of(self, attempt_id: str) -> str:
        with self.engine.connect() as conn:
            task_id: str = conn.exec_driver_sql(
                "SELECT task_id FROM attempts WHERE id = ?", (attempt_id,)).scalar_one()
        return task_id


def frame_pages(raw: bytes, page_size: int) -> list[int]:
    """The page number of each WAL frame in ``raw`` (frames only: a 24-byte header, then
    the page)."""
    return [struct.unpack(">I", raw[i:i + 4])[0] for i in range(0, len(raw), page_size + 24)]


def trees(db_path: Path, pages: list[int]) -> collections.Counter[str]:
    """How many of ``pages`` belong to each table or index of the database, as it is now."""
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        owner = dict(conn.execute("SELECT pageno, name FROM dbstat").fetchall())
    finally:
        conn.close()
    owner[1] = "page 1"
    return collections.Counter(owner.get(p, "free") for p in pages)


def _no_autocheckpoint(dbapi_connection: Any, _record: Any) -> None:
    dbapi_connection.execute("PRAGMA wal_autocheckpoint=0")


def report(run: Run) -> str:
    """One row per transaction: its pages' mean (page splits fall on some commits only, so
    the mean is what a commit costs over time), median and range, and the mean by B-tree."""
    lines = ["| transaction | WAL pages: mean (median, min-max) | pages by B-tree (mean) |",
             "| --- | --- | --- |"]
    for kind in KINDS:
        counts = run.seen[kind]
        totals = [sum(c.values()) for c in counts]
        by_tree: collections.Counter[str] = collections.Counter()
        for c in counts:
            by_tree.update(c)
        trees = ", ".join(f"{name} {n / len(counts):.1f}".replace(".0", "")
                          for name, n in sorted(by_tree.items(), key=lambda kv: (-kv[1], kv[0])))
        lines.append(f"| {kind} | {statistics.mean(totals):.1f} ({statistics.median(totals):g}, "
                     f"{min(totals)}-{max(totals)}) | {trees} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--finished", type=int, default=20_000,
                        help="tasks run to completion before the measured ones")
    parser.add_argument("--repeat", type=int, default=40, help="lone tasks per transaction")
    parser.add_argument("--keep", type=Path, help="put the database in this directory")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="orbit-wal-") as tmp:
        where = args.keep or Path(tmp)
        where.mkdir(parents=True, exist_ok=True)
        run = Run(where / "orbit.db")
        try:
            run.fill(args.finished)
            run.checkpoint()
            for i in range(args.repeat):
                run.lone_task(10_000_000 + 100 * i)
        finally:
            run.engine.dispose()
    print(f"{args.finished} finished tasks before; {args.repeat} lone tasks per transaction; "
          f"page size {run.page_size}")
    print(report(run))


if __name__ == "__main__":
    main()
