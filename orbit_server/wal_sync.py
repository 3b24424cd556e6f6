"""SQLite's write-ahead log made durable by a thread of its own (``--durability``).

SQLite runs with ``synchronous=NORMAL``: a commit writes its WAL frames and returns without
an fsync, so the store thread goes on to the next transaction at once. This module's thread
``fdatasync``s the WAL file and tells the store thread's callers which commits it covered:

- ``full`` (the default): no answer, frame or pushed result leaves before the sync that
  covers every commit made before it was computed (``StoreThread`` hands each turn's
  outcomes here, tagged with the commit count at its end, and they are released once
  ``synced >= tag``). An acknowledged step is on disk exactly as with ``synchronous=FULL``;
  commits that pile up during one sync share the next one.
- ``process``: answers leave at once and the WAL is synced at least every
  ``PROCESS_SYNC_PERIOD_S``; a crash of the server process loses nothing (the frames are in
  the kernel's page cache), a power loss may lose the acknowledged steps of that last period.

When the store thread has nothing else queued it syncs its own turn (``after(here=True)``)
instead of waking this thread: a lone request then crosses one thread less, and nothing waits
behind that sync. It does so only while no earlier turn waits here, so answers still leave in
commit order.

Why this is as safe as ``synchronous=FULL`` for acknowledged steps: a commit's frames are
written to the WAL file before COMMIT returns, and the commit count is read *before* the
``fdatasync``, so every commit it counts is covered. SQLite itself syncs the WAL before a
checkpoint copies it into the database file and the database file after, in both modes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections import deque
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path

from orbit_host.logs import fields

__all__ = ["PROCESS_SYNC_PERIOD_S", "CommitCounter", "Durability", "WalSync"]

PROCESS_SYNC_PERIOD_S = 1.0

_log = logging.getLogger("orbit_server.wal_sync")


class Durability(StrEnum):
    FULL = "full"
    PROCESS = "process"


class CommitCounter:
    """Commits made so far. Bumped on the store thread after each COMMIT returns; read by the
    sync thread (a Python int read is atomic)."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0

    def bump(self) -> None:
        self.count += 1


class WalSync:
    """The sync thread of one SQLite database file.

    ``start()`` once; ``after(tag, release)`` from the store thread for each turn (``release``
    runs at once when the commits up to ``tag`` are durable or nothing is gated, else on the
    sync thread after the sync that covers them, or on the calling thread after its own sync
    with ``here``); ``close()`` at shutdown syncs what is left.
    """

    def __init__(self, db_path: Path, commits: CommitCounter, durability: Durability) -> None:
        self._wal_path = Path(f"{db_path}-wal")
        self._commits = commits
        self._gated = durability is Durability.FULL
        self._period = None if self._gated else PROCESS_SYNC_PERIOD_S
        self._cv = threading.Condition()
        self._waiting: deque[tuple[int, Callable[[], None]]] = deque()
        self._wanted = 0  # the highest tag a caller waits for
        self.synced = 0  # every commit up to this count is on disk
        self.syncs = 0  # fdatasync calls made (metrics)
        self._fd: int | None = None
        self._closing = False
        self._busy = False  # a sync and its releases are under way (on either thread)
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="orbit-wal-sync", daemon=True)
        self._thread.start()

    def after(self, tag: int, release: Callable[[], None], *, here: bool = False) -> None:
        """Run ``release`` once every commit counted up to ``tag`` is durable (``full``), or
        now (``process``, or nothing new since the last sync). ``here``: the caller may sync
        on its own thread when no earlier release waits (the store thread, idle)."""
        if not self._gated or tag <= self.synced:
            release()
            return
        with self._cv:
            here = here and not self._waiting and not self._busy and not self._closing
            if here:
                self._busy = True  # the sync thread stays off until this sync is counted
            else:
                self._waiting.append((tag, release))
                if tag > self._wanted:
                    self._wanted = tag
                    self._cv.notify()
                return
        try:
            self._sync_to(self._commits.count)
        except OSError:  # the sync thread retries; the answer waits for it
            with self._cv:
                self._busy = False
                self._waiting.append((tag, release))
                self._wanted = max(self._wanted, tag)
                self._cv.notify()
            _log.exception("WAL sync on the store thread failed; handed to the sync thread")
            return
        with self._cv:
            self._busy = False
            if self._closing or self._wanted > self.synced:  # else the sync thread sleeps on
                self._cv.notify()
        release()

    def close(self) -> None:
        with self._cv:
            self._closing = True
            self._cv.notify()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def _run(self) -> None:
        while True:
            with self._cv:
                while self._busy or (not self._closing and self._wanted <= self.synced):
                    if not self._cv.wait(self._period) and self._period is not None \
                            and not self._busy:
                        break  # process mode: the period ran out
                closing = self._closing
                self._busy = True
            try:
                target = self._commits.count
                if target > self.synced:
                    self._sync_to(target)
                self._release_up_to(target)
                if closing:
                    self._release_up_to(2**63)  # nothing more will be synced: never strand one
                    return
            finally:
                with self._cv:
                    self._busy = False

    def _sync_to(self, target: int) -> None:
        """Sync the WAL and count every commit up to ``target`` as durable: the caller read
        ``target`` before the sync, so the sync covers all of them."""
        covered = self._sync()
        with self._cv:
            self.synced = max(self.synced, target)
        if covered is not None and _log.isEnabledFor(logging.DEBUG):
            _log.debug("WAL synced up to byte %d (%d commits)", covered, target,
                       extra=fields("wal_synced", commits=target, wal_bytes=covered))

    def _release_up_to(self, target: int) -> None:
        released: list[Callable[[], None]] = []
        with self._cv:
            while self._waiting and self._waiting[0][0] <= target:
                released.append(self._waiting.popleft()[1])
        for release in released:
            release()

    def _sync(self) -> int | None:
        """fdatasync the WAL; the file's size read before it (every frame below that size is
        on disk after it), or None when there is no WAL file (every commit so far is in the
        database file)."""
        fd = self._open()
        if fd is None:
            return None
        stat = os.fstat(fd)
        if stat.st_nlink == 0:  # SQLite replaced the file: sync the one it writes now
            fd = self._open(reopen=True)
            if fd is None:
                return None
            stat = os.fstat(fd)
        os.fdatasync(fd)
        self.syncs += 1
        return stat.st_size

    def _open(self, reopen: bool = False) -> int | None:
        """The WAL file's descriptor, opened on first use and again when SQLite replaced the
        file (it deletes the WAL when the last connection closes, after checkpointing it into
        the database): a deleted file has no links left."""
        if self._fd is not None and not reopen:
            return self._fd
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        try:
            self._fd = os.open(self._wal_path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        return self._fd
