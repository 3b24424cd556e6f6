"""What the use-case modules share: ``Effects`` (what the adapters do after a transaction)
and ``UseCases`` (the engine, the clock, and one transaction per call)."""

from __future__ import annotations

import random
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine

from .config import ServerConfig

SERVER = "server"  # the actor of what the server decides by itself (reaper, deadlines)


@dataclass
class Effects:
    """What the adapters must do after a transaction."""

    terminal_tasks: list[str] = field(default_factory=list)  # wake long-poll waiters
    # Task views read in the same transaction for waited-on terminal tasks (apply_ops with
    # ``watched``): a woken long poll answers with it instead of reading the task again.
    terminal_views: dict[str, dict[str, Any]] = field(default_factory=dict)
    ready_queues: set[str] = field(default_factory=set)  # run a dispatch pass
    cancels: list[tuple[str, str, int]] = field(default_factory=list)  # (instance, attempt, epoch)
    next_due_ms: int | None = None  # earliest future instant worth looking again

    def due(self, at_ms: int | None) -> None:
        if at_ms is not None and (self.next_due_ms is None or at_ms < self.next_due_ms):
            self.next_due_ms = at_ms


class UseCases:
    """The engine, configuration, clock and randomness every use case needs."""

    def __init__(self, engine: Engine, config: ServerConfig, clock: Callable[[], int],
                 rng: random.Random) -> None:
        self.engine = engine
        self.config = config
        self.clock = clock
        self.rng = rng
        # Retries scheduled in the future, by (available_at_ms, queue_id): reap() turns the
        # due ones into ready queues so the dispatcher looks again without polling the table.
        self._wakeups: list[tuple[int, str]] = []
        self._wakeups_loaded = False

    @contextmanager
    def _write(self) -> Any:
        with self.engine.begin() as conn:
            yield conn

    @contextmanager
    def _read(self) -> Any:
        with self.engine.connect() as conn:
            conn.execution_options(orbit_read_only=True)
            with conn.begin():
                yield conn
