"""bench_peers.py's producers: each system driven through its own Python client (Orbit's
``OrbitClient``, Celery's ``delay``/``AsyncResult``, Dramatiq's ``send``/``get_result``)."""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from peers_setup import (
    BATCH,
    TIME_LIMIT_S,
    WAIT_S,
    Work,
)

from orbit_client import OrbitClient, is_settled


class Producer(Protocol):
    def submit(self, work: Work) -> Any: ...
    def submit_batch(self, works: Sequence[Work]) -> list[Any]: ...
    def wait(self, handle: Any, timeout: float = WAIT_S) -> None: ...
    def chord(self, members: int, ms: float, timeout: float = WAIT_S) -> None: ...
    def close(self) -> None: ...


@dataclass(frozen=True)
class ProducerConf:
    """What a producer process needs to build its client (picklable, for spawn)."""

    system: str
    redis_url: str = ""
    credentials: str = ""  # Orbit producer credentials file
    queue: str = ""


def orbit_spec(work: Work) -> dict[str, Any]:
    spec: dict[str, Any] = {"handler": f"peers.{work.kind}", "handler_version": "1",
                            "payload_version": "1", "payload": {}, "idempotency": "IDEMPOTENT"}
    if work.kind == "burn":
        spec["payload"] = {"ms": work.arg}
    elif work.kind == "spin":
        spec.update(payload={"pidfile": work.arg}, max_attempts=1,
                    attempt_timeout_ms=int(TIME_LIMIT_S * 1000))
    return spec


class OrbitProducer:
    def __init__(self, conf: ProducerConf) -> None:
        self.client = OrbitClient(credentials=conf.credentials)
        self.queue = conf.queue

    def submit(self, work: Work) -> str:
        return str(self.client.submit(self.queue, orbit_spec(work))["id"])

    def submit_batch(self, works: Sequence[Work]) -> list[str]:
        ids: list[str] = []
        for start in range(0, len(works), BATCH):
            chunk = [orbit_spec(w) for w in works[start:start + BATCH]]
            ids += [str(t["id"]) for t in self.client.submit_batch(self.queue, chunk)]
        return ids

    def wait(self, handle: Any, timeout: float = WAIT_S) -> None:
        # One long poll per result (OrbitClient.wait reads the task first, then polls: two
        # requests for a task still running, which would bill Orbit an extra round trip).
        deadline = time.monotonic() + timeout
        for _ in range(1000):  # the deadline ends it first, whatever the server answers
            left_ms = int((deadline - time.monotonic()) * 1000)
            if left_ms <= 0:
                break
            task = self.client.get_task(handle, wait_ms=min(left_ms, 60_000))
            if is_settled(task):
                if task["state"] != "SUCCEEDED":
                    raise SystemExit(f"orbit task {handle} ended {task['state']}")
                return
        raise SystemExit(f"orbit task {handle} not settled in {timeout:.0f} s")

    def chord(self, members: int, ms: float, timeout: float = WAIT_S) -> None:
        """One workflow: ``members`` burns, then a join that receives their results."""
        from orbit_client import chord, group
        from orbit_wire import TaskType

        burn: TaskType[dict[str, float], int] = TaskType("peers.burn", "1", "1",
                                                         idempotent=True)
        join: TaskType[dict[str, Any], int] = TaskType("peers.join", "1", "1",
                                                       idempotent=True)
        flow = chord(group(burn.s({"ms": ms}) for _ in range(members)), join.s({}))
        got = self.client.submit(flow, queue=self.queue).result(timeout)
        if got != members:
            raise SystemExit(f"orbit chord: the callback saw {got} results, not {members}")

    def close(self) -> None:
        self.client.close()


class CeleryProducer:
    def __init__(self, conf: ProducerConf) -> None:
        self.tasks = importlib.import_module("peers_celery")
        # This process only (the workers keep Celery's defaults): if Redis is already gone
        # when a result handle is dropped (teardown after an error), give up at once
        # instead of retrying the unsubscribe 20 times, a second apart, per handle.
        self.tasks.app.conf.result_backend_transport_options = {
            "retry_policy": {"max_retries": 0}}
        self.unawaited: dict[str, Any] = {}

    def submit(self, work: Work) -> Any:
        task = getattr(self.tasks, work.kind)
        if work.kind == "spin":
            handle = task.apply_async(args=[work.arg], time_limit=TIME_LIMIT_S)
        else:
            handle = task.delay() if work.arg is None else task.delay(work.arg)
        self.unawaited[handle.id] = handle
        return handle

    def submit_batch(self, works: Sequence[Work]) -> list[Any]:
        raise NotImplementedError("Celery has no batch submit")

    def wait(self, handle: Any, timeout: float = WAIT_S) -> None:
        handle.get(timeout=timeout)
        del self.unawaited[handle.id]

    def chord(self, members: int, ms: float, timeout: float = WAIT_S) -> None:
        from celery import chord, group

        header = group(self.tasks.burn.s(ms) for _ in range(members))
        got = chord(header)(self.tasks.join.s()).get(timeout=timeout)
        if got != members:
            raise SystemExit(f"celery chord: the callback saw {got} results, not {members}")

    def close(self) -> None:
        """Release the handles never awaited (the spinners', or all after an error) while
        Redis still runs: Celery's backend holds them until their result comes."""
        for handle in self.unawaited.values():
            handle.backend.remove_pending_result(handle)
        self.unawaited.clear()


class DramatiqProducer:
    def __init__(self, conf: ProducerConf) -> None:
        self.actors = importlib.import_module("peers_dramatiq")

    def submit(self, work: Work) -> Any:
        actor = getattr(self.actors, work.kind)
        if work.kind == "spin":
            return actor.send_with_options(args=(work.arg,),
                                           time_limit=int(TIME_LIMIT_S * 1000))
        return actor.send() if work.arg is None else actor.send(work.arg)

    def submit_batch(self, works: Sequence[Work]) -> list[Any]:
        raise NotImplementedError("Dramatiq has no batch submit")

    def wait(self, handle: Any, timeout: float = WAIT_S) -> None:
        from dramatiq.results import ResultTimeout

        # The results backend's blocking read outlives its Redis socket's 5 s read timeout
        # (a redis TimeoutError, not a ResultTimeout), so a longer wait is taken in
        # 1-second reads; each returns as soon as the result is there.
        deadline = time.monotonic() + timeout
        while True:
            try:
                handle.get_result(block=True, timeout=1000)
                return
            except ResultTimeout:
                if time.monotonic() >= deadline:
                    raise

    def chord(self, members: int, ms: float, timeout: float = WAIT_S) -> None:
        import dramatiq

        callback = self.actors.join.message()
        members_group = dramatiq.group(self.actors.burn.message(ms) for _ in range(members))
        members_group.add_completion_callback(callback)
        members_group.run()
        self.wait(callback, timeout)

    def close(self) -> None:
        pass


PRODUCER_CLASSES: dict[str, Callable[[ProducerConf], Producer]] = {
    "orbit": OrbitProducer, "celery": CeleryProducer, "dramatiq": DramatiqProducer}


def make_producer(conf: ProducerConf) -> Producer:
    # The peers' modules read the Redis URL when imported, so it goes in first.
    if conf.redis_url:
        os.environ["PEERS_REDIS_URL"] = conf.redis_url
    return PRODUCER_CLASSES[conf.system](conf)
