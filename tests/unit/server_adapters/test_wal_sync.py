"""WalSync on a real SQLite file: answers wait for the sync that covers their commits
(``full``), leave at once in ``process`` mode, and nothing waits past ``close``."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from support.waiting import UNIT

from orbit_server.wal_sync import CommitCounter, Durability, WalSync


def _wal_db(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("CREATE TABLE t (x INTEGER)")
    return conn


def _commit(conn: sqlite3.Connection, commits: CommitCounter) -> int:
    conn.execute("INSERT INTO t VALUES (1)")
    commits.bump()
    return commits.count


def test_full_releases_only_after_a_sync_covering_the_tag(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    conn = _wal_db(db)
    commits = CommitCounter()
    wal = WalSync(db, commits, Durability.FULL)
    seen: list[tuple[int, int, int]] = []  # (tag, synced, syncs) when released
    done = threading.Event()
    wal.start()
    try:
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
    finally:
        wal.close()
        conn.close()


def test_process_releases_at_once_and_syncs_in_the_background(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    conn = _wal_db(db)
    commits = CommitCounter()
    wal = WalSync(db, commits, Durability.PROCESS)
    wal.start()
    try:
        tag = _commit(conn, commits)
        released = threading.Event()
        wal.after(tag, released.set)
        assert released.is_set() and wal.synced < tag  # answered before any sync
        deadline = threading.Event()
        for _ in range(100):  # bounded: the period is one second
            if wal.synced >= tag:
                break
            deadline.wait(0.05 * UNIT)
        assert wal.synced >= tag and wal.syncs >= 1
    finally:
        wal.close()
        conn.close()


def test_close_syncs_and_releases_what_waits(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    conn = _wal_db(db)
    commits = CommitCounter()
    wal = WalSync(db, commits, Durability.FULL)
    released = threading.Event()
    tag = _commit(conn, commits)
    wal.after(tag, released.set)  # queued before the thread runs
    wal.start()
    wal.close()
    assert released.is_set() and wal.synced >= tag
    conn.close()


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
