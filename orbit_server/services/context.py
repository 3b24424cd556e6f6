"""The transaction context every group of use cases is composed over: the engine, the
configuration, the clock and the randomness, and the two kinds of transaction."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from sqlalchemy import Connection, Engine

from ..config import ServerConfig


@dataclass(frozen=True, slots=True)
class TxContext:
    """What a use case needs besides its arguments. ``clock()`` is wall-clock milliseconds;
    ``rng`` gives the retry policy's jitter draws."""

    engine: Engine
    config: ServerConfig
    clock: Callable[[], int]
    rng: random.Random

    @contextmanager
    def write(self) -> Iterator[Connection]:
        """A write transaction (``BEGIN IMMEDIATE`` on SQLite), committed when the block
        ends and rolled back if it raises."""
        with self.engine.begin() as conn:
            yield conn

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A read-only transaction (a plain deferred ``BEGIN`` on SQLite)."""
        with self.engine.connect() as conn:
            conn.execution_options(orbit_read_only=True)
            with conn.begin():
                yield conn
