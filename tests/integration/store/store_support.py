"""Helpers for the service tests on a real database (a SQLite file, or MariaDB) with a
hand-moved clock: the ``World`` that conftest's ``world`` fixture gives every test, with the
helpers the tests share as its methods (submit, the worker ops, the views of attempts,
evidence and audit, row counts, a second service on the same database, racing threads).
A uniquely named module (not conftest) so the whole test tree imports it without clashing
with other directories' conftest modules."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy import Engine, Table, event, func, select
from support.waiting import UNIT

from orbit_server.auth import Principal
from orbit_server.config import ServerConfig
from orbit_server.services import Effects, Services, WorkerBinding
from orbit_server.store import create_engine_for, migrate
from orbit_wire.frames import FinishOp, Hello, OpResult, RenewOp, Report, StartOp
from orbit_wire.ids import new_id
from orbit_wire.model import Capability, Outcome
from orbit_wire.policy import CapabilityPolicy

T0 = 1_800_000_000_000
CAP = Capability("text.normalize", "v1", "v1")


class Clock:
    """Wall-clock milliseconds that only move when a test says so."""

    def __init__(self, start: int = T0) -> None:
        self.now = start

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> int:
        self.now += ms
        return self.now


@dataclass
class World:
    service: Services
    engine: Engine
    clock: Clock
    admin: Principal
    producer: Principal
    queue_id: str
    worker_cred: dict[str, Any]
    url: str
    _msg: int = 0

    @staticmethod
    def spec(**extra: Any) -> dict[str, Any]:
        """A task spec for CAP (payload ``{"text": "hi"}`` unless given)."""
        return {"handler": CAP.handler, "handler_version": CAP.handler_version,
                "payload_version": CAP.payload_version, "payload": {"text": "hi"}, **extra}

    def submit(self, **spec: Any) -> dict[str, Any]:
        made, _ = self.service.tasks.submit(self.producer, self.queue_id, [self.spec(**spec)])
        return made[0][0]

    def submit_many(self, n: int, **spec: Any) -> list[str]:
        """Submit ``n`` tasks in one batch (payloads ``{"i": i}``); their ids in order."""
        specs: list[object] = [self.spec(payload={"i": i}, **spec) for i in range(n)]
        made, _ = self.service.tasks.submit(self.producer, self.queue_id, specs)
        return [view["id"] for view, _created in made]

    def attempts(self, task_id: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = self._history(task_id)["attempts"]
        return out

    def evidence(self, task_id: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = self._history(task_id)["evidence"]
        return out

    def _history(self, task_id: str) -> dict[str, Any]:
        return dict(as_json(self.service.tasks.list_attempts(self.producer, task_id)))

    def audit(self, task_id: str) -> list[dict[str, Any]]:
        view = as_json(self.service.tasks.audit_trail(self.producer, task_id))
        out: list[dict[str, Any]] = view["events"]
        return out

    def count(self, table: Table) -> int:
        """The number of rows in ``table``."""
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(table)).scalar_one())

    @contextmanager
    def listening(self, name: str, listener: Callable[..., None]) -> Iterator[None]:
        """``listener`` hears the engine's event ``name`` while the block runs."""
        event.listen(self.engine, name, listener)
        try:
            yield
        finally:
            event.remove(self.engine, name, listener)

    @contextmanager
    def statements(self, *naming: str) -> Iterator[list[str]]:
        """The SQL statements run on the engine while the block runs (with ``naming``: only
        those that contain one of these words)."""
        seen: list[str] = []

        def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            if not naming or any(word in statement for word in naming):
                seen.append(statement)

        with self.listening("before_cursor_execute", record):
            yield seen

    @contextmanager
    def driver_statements(self) -> Iterator[list[str]]:
        """Every statement run on the engine in the block; on SQLite the driver's own (its
        trace callback on new connections), which includes those the hot paths run past
        SQLAlchemy's cursor events."""
        if self.engine.dialect.name != "sqlite":
            with self.statements() as seen:
                yield seen
            return
        seen = []

        def trace(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.set_trace_callback(seen.append)

        self.engine.dispose()  # new connections, each traced
        try:
            with self.listening("connect", trace):
                yield seen
        finally:
            self.engine.dispose()

    @contextmanager
    def other_service(self, seed: int) -> Iterator[Services]:
        """A second Services on its own engine over the same database (another replica, or
        another connection); the engine is disposed of afterwards."""
        engine = create_engine_for(self.url)
        try:
            yield Services(engine, self.service.tx.config, self.clock, random.Random(seed))
        finally:
            engine.dispose()

    def hello(self, instance_id: str | None = None, secret: str = "instance-secret",
              caps: tuple[Capability, ...] = (CAP,),
              policies: tuple[CapabilityPolicy, ...] | None = None,
              service: Services | None = None,
              labels: dict[str, str] | None = None) -> WorkerBinding:
        return (service or self.service).workers.worker_hello(Hello(
            credential_id=self.worker_cred["credential_id"],
            credential_secret=self.worker_cred["secret"],
            instance_id=instance_id or new_id(self.clock()), instance_secret=secret,
            queue_id=self.queue_id, capabilities=caps, capacity=4, policies=policies,
            labels=labels,
        ))

    def msg(self) -> str:
        self._msg += 1
        return f"m{self._msg}"

    def start(self, b: WorkerBinding, attempt_id: str, epoch: int,
              msg: str | None = None) -> OpResult:
        op = StartOp(msg or self.msg(), attempt_id, epoch, 4242)
        results, _ = self.service.workers.apply_ops(b, [op])
        return results[0]

    def renew(self, b: WorkerBinding, attempt_id: str, epoch: int,
              msg: str | None = None) -> OpResult:
        op = RenewOp(msg or self.msg(), attempt_id, epoch)
        results, _ = self.service.workers.apply_ops(b, [op])
        return results[0]

    def finish(self, b: WorkerBinding, attempt_id: str, epoch: int, outcome: Outcome,
               code: str | None = None, retryable: bool = False, result: Any = None,
               result_json: str | None = None, details_json: str | None = None,
               msg: str | None = None,
               report: Report | None = None) -> tuple[OpResult, Effects]:
        if result is not None:
            result_json = orjson.dumps(result).decode()
        op = FinishOp(msg or self.msg(), attempt_id, epoch, outcome, code, retryable,
                      result_json, details_json, report or Report(exit_code=0, cpu_ms=5))
        results, effects = self.service.workers.apply_ops(b, [op])
        return results[0], effects

    def run_once(self, b: WorkerBinding) -> tuple[str, int]:
        """Reserve the next task and start it; returns (attempt_id, epoch)."""
        (res,) = self.service.workers.reserve(b, 1)
        ok = self.start(b, res.attempt_id, res.epoch)
        assert ok.ok, ok
        return res.attempt_id, res.epoch

    def task(self, task_id: str) -> dict[str, Any]:
        return self.service.tasks.get_task(self.producer, task_id)

    @staticmethod
    def receipt_row(msg_id: str, *, at_ms: int = 1, instance_id: str = "0" * 32,
                    op: str = "renew") -> dict[str, object]:
        """A receipts row as INSERT_RECEIPT takes it."""
        return {"instance_id": instance_id, "msg_id": msg_id, "op": op, "answer": "{}",
                "created_at_ms": at_ms}

    @staticmethod
    def race(*calls: Callable[[], object], timeout_s: float = 60.0) -> list[BaseException]:
        """Run each call on its own thread, all released at once; returns what they raised.
        Bounded: a thread still running after ``timeout_s`` (units) fails the test."""
        errors: list[BaseException] = []
        gate = threading.Barrier(len(calls))

        def run(call: Callable[[], object]) -> None:
            try:
                gate.wait(timeout=10 * UNIT)
                call()
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(call,)) for call in calls]
        for th in threads:
            th.start()
        for th in threads:
            th.join(timeout=timeout_s * UNIT)
        assert not any(th.is_alive() for th in threads)
        return errors


def make_world(url: str) -> Iterator[World]:
    """Migrate the (empty) database at ``url``, bootstrap an admin, a queue, a producer and a
    worker credential; dispose of the engine afterwards (a generator for fixtures)."""
    migrate(url)
    engine = create_engine_for(url)
    clock = Clock()
    config = ServerConfig(db_url=url, session_ttl_ms=15_000, kill_grace_ms=2_000)
    service = Services(engine, config, clock, random.Random(7))
    made = service.admin.bootstrap_admin("root")
    admin = service.admin.authenticate(f"{made['credential_id']}.{made['secret']}")
    queue = service.admin.create_queue(admin, "q")
    prod = service.admin.create_credential(admin, "producer", [queue["id"]], "p")
    producer = service.admin.authenticate(f"{prod['credential_id']}.{prod['secret']}")
    worker = service.admin.create_credential(admin, "worker", [queue["id"]], "w")
    try:
        yield World(service, engine, clock, admin, producer, queue["id"], worker, url)
    finally:
        engine.dispose()


def as_json(value: Any) -> Any:
    """A view with orjson.Fragment values, round-tripped to plain JSON."""
    return orjson.loads(orjson.dumps(value))
