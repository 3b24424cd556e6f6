"""The transaction context every group of use cases is composed over: the engine, the
configuration, the clock and the randomness, and the two kinds of transaction.

Group commit (``run_group``): the store thread may hand several queued calls over at once.
They then run in ONE database transaction, each ``write()`` block in its own SAVEPOINT (a
call whose block raises rolls back only that block, as it would its own transaction), and
commit once: one fsync on SQLite, one durable redo-log flush on MySQL, for all of them. Their
answers are handed out only after that commit, so every effect an adapter applies (frames,
wake-ups, responses) still follows a durable commit. A fault that may have undone more than
one savepoint (any database error, a lost race, a bug) rolls the whole group back and runs
each call again alone, with the usual bounded retries (``store.retry``); a failed COMMIT is
answered to every call of the group and never run again (it may have happened).
"""

from __future__ import annotations

import contextlib
import random
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError

from orbit_wire.errors import OrbitError

from ..config import ServerConfig
from ..store.retry import is_retryable_conflict, no_retries, translate
from ..wal_sync import CommitCounter
from .credential_table import CredentialTable
from .fair_table import FairTable
from .limit_table import LimitTable
from .pause_board import PauseBoard

# (True, value) or (False, exception), per call.
CallOutcome = tuple[bool, Any]


def _changes(conn: Connection) -> int | None:
    """SQLite's count of rows changed so far on this connection; None elsewhere."""
    raw = conn.connection.dbapi_connection
    return raw.total_changes if isinstance(raw, sqlite3.Connection) else None


def run_alone(call: Callable[[], Any]) -> CallOutcome:
    try:
        return True, call()
    except BaseException as exc:  # handed to the awaiting coroutine
        return False, exc


@dataclass(frozen=True, slots=True)
class TxContext:
    """What a use case needs besides its arguments. ``clock()`` is wall-clock milliseconds;
    ``rng`` gives the retry policy's jitter draws."""

    engine: Engine
    config: ServerConfig
    clock: Callable[[], int]
    rng: random.Random
    # The connection of the group commit running on this thread, if any.
    _group: threading.local = field(default_factory=threading.local, repr=False,
                                    compare=False)
    # Called when a group commit rolled back (caches filled from its reads forget them).
    _rollback_hooks: list[Callable[[], None]] = field(default_factory=list, repr=False,
                                                      compare=False)
    # Commits made so far: the WAL sync thread covers each before its answers leave.
    commits: CommitCounter = field(default_factory=CommitCounter, repr=False, compare=False)
    # Credential rows in memory (authentication and the worker requests' fence).
    credentials: CredentialTable = field(init=False, repr=False, compare=False)
    # The pauses in force (services.pause_board): every claim narrows by them.
    pauses: PauseBoard = field(default_factory=PauseBoard, repr=False, compare=False)
    # Each queue's flow-control limits in memory (dispatch of a queue without any reads none).
    limits: LimitTable = field(init=False, repr=False, compare=False)
    # Each queue's fair key name in memory (a queue that is not fair reads none).
    fair: FairTable = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        table = CredentialTable(self.config.auth_cache_ms)
        object.__setattr__(self, "credentials", table)
        self._rollback_hooks.append(table.clear)
        limits = LimitTable()
        object.__setattr__(self, "limits", limits)
        self._rollback_hooks.append(limits.clear)
        fair = FairTable()
        object.__setattr__(self, "fair", fair)
        self._rollback_hooks.append(fair.clear)

    def on_group_rollback(self, hook: Callable[[], None]) -> None:
        self._rollback_hooks.append(hook)

    @contextmanager
    def write(self) -> Iterator[Connection]:
        """A write transaction (``BEGIN IMMEDIATE`` on SQLite), committed when the block
        ends and rolled back if it raises (in a group commit: a savepoint of the group's
        transaction, released or rolled back the same way)."""
        conn: Connection | None = getattr(self._group, "conn", None)
        if conn is not None:
            with conn.begin_nested():
                yield conn
            return
        pinned: Connection | None = getattr(self._group, "writer", None)
        if pinned is not None:
            before = _changes(pinned)
            try:
                with pinned.begin():
                    yield pinned
            finally:  # counted even when COMMIT failed: it may have happened
                self._committed(pinned, before)
            return
        with self.engine.connect() as conn:
            before = _changes(conn)
            try:
                with conn.begin():
                    yield conn
            finally:
                self._committed(conn, before)

    def _committed(self, conn: Connection, before: int | None) -> None:
        """Count a commit that wrote something (SQLite: its changes counter moved; on MySQL
        every write transaction): the WAL sync thread syncs only for those."""
        if before is None or _changes(conn) != before:
            self.commits.bump()

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A read-only transaction (a plain deferred ``BEGIN`` on SQLite; in a group commit,
        the group's transaction, which sees the writes of the calls before it)."""
        grouped: Connection | None = getattr(self._group, "conn", None)
        if grouped is not None:
            yield grouped
            return
        pinned: Connection | None = getattr(self._group, "reader", None)
        if pinned is not None:
            with pinned.begin():
                yield pinned
            return
        with self.engine.connect() as conn:
            conn.execution_options(orbit_read_only=True)
            with conn.begin():
                yield conn

    @contextmanager
    def pinned(self) -> Iterator[None]:
        """On SQLite, the calling thread keeps one write and one read connection for the
        block instead of taking one from the pool per transaction (the pool's check-out,
        reset and check-in cost a store call more CPU than its statements); the server's
        store thread runs inside it. Elsewhere a no-op: MySQL connections are checked
        before each use (``pool_pre_ping``), which a held connection would skip."""
        if self.engine.dialect.name != "sqlite":
            yield
            return
        local = self._group
        local.writer = self.engine.connect()
        local.reader = self.engine.connect().execution_options(orbit_read_only=True)
        try:
            yield
        finally:
            for name in ("writer", "reader"):
                with contextlib.suppress(Exception):
                    getattr(local, name).close()
                setattr(local, name, None)

    def run_group(self, calls: Sequence[Callable[[], Any]]) -> list[CallOutcome]:
        """Run ``calls`` (each a use-case call) in one transaction with one commit; the
        outcome of each, in order (see the module docstring)."""
        pinned: Connection | None = getattr(self._group, "writer", None)
        try:
            conn = pinned if pinned is not None else self.engine.connect()
        except DBAPIError:
            return [run_alone(call) for call in calls]
        before = _changes(conn)
        try:
            outcomes: list[CallOutcome] = []
            try:
                trans = conn.begin()
                self._group.conn = conn
                try:
                    with no_retries():
                        for call in calls:
                            try:
                                outcomes.append((True, call()))
                            except OrbitError as exc:
                                if is_retryable_conflict(exc):
                                    raise
                                outcomes.append((False, exc))  # a refusal: nothing written
                finally:
                    self._group.conn = None
            except Exception:
                with contextlib.suppress(Exception):
                    conn.rollback()
                for hook in self._rollback_hooks:
                    hook()
                return [run_alone(call) for call in calls]
            try:
                trans.commit()
            except DBAPIError as exc:  # the commit may have happened: never run again
                typed = translate(exc) or exc
                return [(False, typed) for _ in calls]
            finally:
                self._committed(conn, before)
            return outcomes
        finally:
            if conn is not pinned:
                with contextlib.suppress(Exception):
                    conn.close()
