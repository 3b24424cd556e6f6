"""Helpers for the service tests on a real database (a SQLite file, or MariaDB) with a
hand-moved clock. A uniquely named module (not conftest) so the whole test tree imports it
without clashing with other directories' conftest modules."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy import Engine

from orbit_server.auth import Principal
from orbit_server.config import ServerConfig
from orbit_server.services import Effects, Services, WorkerBinding
from orbit_server.store import create_engine_for, migrate
from orbit_wire.frames import FinishOp, Hello, OpResult, RenewOp, Report, StartOp
from orbit_wire.ids import new_id
from orbit_wire.model import Capability, Outcome

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

    def submit(self, **spec: Any) -> dict[str, Any]:
        body = {"handler": CAP.handler, "handler_version": CAP.handler_version,
                "payload_version": CAP.payload_version, "payload": {"text": "hi"}, **spec}
        made, _ = self.service.tasks.submit(self.producer, self.queue_id, [body])
        return made[0][0]

    def hello(self, instance_id: str | None = None, secret: str = "instance-secret",
              caps: tuple[Capability, ...] = (CAP,)) -> WorkerBinding:
        return self.service.workers.worker_hello(Hello(
            credential_id=self.worker_cred["credential_id"],
            credential_secret=self.worker_cred["secret"],
            instance_id=instance_id or new_id(self.clock()), instance_secret=secret,
            queue_id=self.queue_id, capabilities=caps, capacity=4,
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
