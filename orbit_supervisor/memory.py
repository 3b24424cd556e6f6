"""The memory watch of one child: its process tree's RSS, sampled with psutil.

With ``--max-memory-per-child`` the pool looks at a child's tree (the child and every
descendant) between tasks, and every ``interval`` while a task runs; over the limit the
child is recycled (between tasks) or killed (during one). The descendants seen while
sampling are kept as ``psutil.Process`` objects, so a kill also reaches those that left
the child's process group (``kill_descendants``; psutil refuses a pid that was reused).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import psutil

from orbit_host import procutil
from orbit_host.task_owner import TaskOwner, current_task

__all__ = ["ChildMemory"]


class ChildMemory:
    """What the watch knows of one slot's current child; ``forget`` for the next child."""

    __slots__ = ("_tracked", "_watcher")

    def __init__(self) -> None:
        self._tracked: dict[int, psutil.Process] = {}  # descendants, by pid
        self._watcher: asyncio.Task[None] | None = None

    def over_limit(self, pid: int | None, limit: int) -> int | None:
        """The tree's RSS in bytes if it is over ``limit``, else None (also for no pid)."""
        rss = self._tree_rss(pid)
        return rss if rss is not None and rss > limit else None

    def kill_descendants(self) -> None:
        """SIGKILL the descendants seen by the last sample (the tree's group is the
        caller's to signal first)."""
        for proc in list(self._tracked.values()):
            with contextlib.suppress(psutil.Error):
                proc.kill()  # psutil refuses if the pid was reused

    def watch(self, tasks: TaskOwner, pid: int | None, limit: int, interval: float, *,
              running: Callable[[], bool], kill: Callable[[int], None]) -> None:
        """Sample every ``interval`` seconds while ``running()``, in a task of ``tasks``;
        over ``limit`` call ``kill(rss)`` once and stop. The child was under the limit when
        its task started (checked between tasks), so the first look is one interval in."""
        self.stop()
        self._watcher = tasks.start(self._watch(pid, limit, interval, running, kill))

    def stop(self) -> None:
        """Stop the sampling task, unless it is the caller (a kill from within it)."""
        watcher, self._watcher = self._watcher, None
        if watcher is not None and watcher is not current_task():
            watcher.cancel()

    def forget(self) -> None:
        """The child is gone: stop sampling and drop what was tracked."""
        self.stop()
        self._tracked = {}

    async def _watch(self, pid: int | None, limit: int, interval: float,
                     running: Callable[[], bool], kill: Callable[[int], None]) -> None:
        while True:
            await asyncio.sleep(interval)
            if not running():
                return
            rss = self.over_limit(pid, limit)
            if rss is not None:
                self._watcher = None
                kill(rss)
                return

    def _tree_rss(self, pid: int | None) -> int | None:
        """RSS of the child plus its descendants; refreshes the tracked descendants."""
        if pid is None:
            return None
        tracked: dict[int, psutil.Process] = {}
        total = 0
        for each in [pid, *procutil.descendant_pids(pid)]:
            proc = self._tracked.get(each)
            try:
                if proc is None:
                    proc = psutil.Process(each)
                total += proc.memory_info().rss
            except psutil.Error:
                continue
            if each != pid:
                tracked[each] = proc
        self._tracked = tracked
        return total

