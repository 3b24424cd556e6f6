"""WalSync on a real SQLite file: answers wait for the sync that covers their commits
(``full``), leave at once in ``process`` mode, and nothing waits past ``close``."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

from support.waiting import UNIT

from orbit_server.wal_sync import CommitCounter, Durability, WalSync


def _wal_db(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("CREATE TABLE t (x INTEGER)")
    return conn


@contextlib.contextmanager
def _world(tmp_path: Path, durability: Durability = Durability.FULL, *, started: bool = True,
           ) -> Iterator[tuple[sqlite3.Connection, CommitCounter, WalSync]]:
    """A WAL database, its commit counter and its WalSync (started unless told), closed after."""
    db = tmp_path / "t.db"
    conn = _wal_db(db)
    commits = CommitCounter()
    wal = WalSync(db, commits, durability)
    if started:
        wal.start()
    try:
        yield conn, commits, wal
    finally:
        wal.close()
        conn.close()


def _commit(conn: sqlite3.Connection, commits: CommitCounter) -> int:
    conn.execute("INSERT INTO t VALUES (1)")
    commits.bump()
    return commits.count


def test_full_releases_only_after_a_sync_covering_the_tag(tmp_path: Path) -> None:
    with _world(tmp_path) as (conn, commits, wal):
        seen: list[tuple[int, int, int]] = []  # (tag, synced, syncs) when released
        done = threading.Event()
        tags = [_commit(conn, commits) for _ in range(3)]
        for tag in tags:
            wal.after(tag, lambda tag=tag: (seen.append((tag, wal.synced, wal.syncs)),
                                            done.set() if len(seen) == 3 else None))
        assert done.wait(10 * UNIT)
        assert [s[0] for s in seen] == tags  # in commit order
        for tag, synced, syncs in seen:
            assert synced >= tag and syncs >= 1
        # Nothing new committed: a later answer needs no sync of its own.
        syncs = wal.syncs
        released = threading.Event()
        wal.after(commits.count, released.set)
        assert released.is_set() and wal.syncs == syncs


def test_process_releases_at_once_and_syncs_in_the_background(tmp_path: Path) -> None:
    with _world(tmp_path, Durability.PROCESS) as (conn, commits, wal):
        tag = _commit(conn, commits)
        released = threading.Event()
        wal.after(tag, released.set, here=True)  # never synced here in process mode
        assert released.is_set() and wal.synced < tag  # answered before any sync
        deadline = threading.Event()
        for _ in range(100):  # bounded: the period is one second
            if wal.synced >= tag:
                break
            deadline.wait(0.05 * UNIT)
        assert wal.synced >= tag and wal.syncs >= 1


def test_close_syncs_and_releases_what_waits(tmp_path: Path) -> None:
    with _world(tmp_path, started=False) as (conn, commits, wal):
        released = threading.Event()
        tag = _commit(conn, commits)
        wal.after(tag, released.set)  # queued before the thread runs
        wal.start()
        wal.close()
        assert released.is_set() and wal.synced >= tag


def test_no_wal_file_counts_as_synced(tmp_path: Path) -> None:
    commits = CommitCounter()
    commits.bump()
    wal = WalSync(tmp_path / "absent.db", commits, Durability.FULL)
    released = threading.Event()
    wal.start()
    try:
        wal.after(1, released.set)
        assert released.wait(10 * UNIT)
        assert wal.syncs == 0
    finally:
        wal.close()


def test_here_syncs_on_the_calling_thread_when_nothing_waits(tmp_path: Path) -> None:
    with _world(tmp_path) as (conn, commits, wal):
        tag = _commit(conn, commits)
        seen: list[tuple[str, int, int]] = []
        wal.after(tag, lambda: seen.append((threading.current_thread().name, wal.synced,
                                            wal.syncs)), here=True)
        # Released before after() returned, on this thread, once synced past the tag.
        assert seen == [(threading.current_thread().name, tag, 1)]


def test_here_waits_behind_an_earlier_release_in_commit_order(tmp_path: Path) -> None:
    with _world(tmp_path, started=False) as (conn, commits, wal):
        order: list[int] = []
        both = threading.Event()
        first = _commit(conn, commits)
        wal.after(first, lambda: order.append(first))  # queued: no sync thread yet
        second = _commit(conn, commits)
        wal.after(second, lambda: (order.append(second), both.set()), here=True)
        assert order == []  # not released ahead of the first
        wal.start()
        assert both.wait(10 * UNIT)
        assert order == [first, second] and wal.synced >= second


def test_a_replaced_wal_file_is_reopened(tmp_path: Path) -> None:
    with _world(tmp_path) as (conn, commits, wal):
        wal.after(_commit(conn, commits), lambda: None, here=True)
        conn.close()  # the last connection checkpoints and deletes the WAL file
        assert not (tmp_path / "t.db-wal").exists()
        with contextlib.closing(sqlite3.connect(tmp_path / "t.db", isolation_level=None,
                                                check_same_thread=False)) as again:
            again.execute("PRAGMA synchronous=NORMAL")
            tag = _commit(again, commits)  # written to a new WAL file
            wal.after(tag, lambda: None, here=True)
            assert wal.synced >= tag and wal.syncs == 2
            assert wal._fd is not None and os.fstat(wal._fd).st_nlink == 1  # the new file
