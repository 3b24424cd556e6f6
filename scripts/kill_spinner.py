"""Handlers for scripts/bench_kills.py, and the layout of the shared page they stamp.

``kill_spin`` ignores SIGTERM, optionally starts a grandchild in its own session, and then
both spin inside one C call (a small library compiled by the benchmark, loaded with ctypes)
that never returns to Python before its bound: every turn of the C loop reads
CLOCK_MONOTONIC and CLOCK_REALTIME and stores both into this process's stamp in a shared
page (a file under /dev/shm, mapped by every process). Only a SIGKILL ends it early, so the
last stamp left in the page is the last handler instruction, to within one loop turn (tens
of nanoseconds). ``noop`` serves the benchmark's warm-up tasks.

Page layout: slot ``i`` (one per task, the payload's ``slot``) is ``SLOT_BYTES`` long and
holds two stamps of ``STAMP_BYTES``: the child's at ``CHILD``, the grandchild's at
``GRANDCHILD``. Each stamp is six little int64 fields at the offsets below; a process writes
``pid`` and ``start_ticks`` (field 22 of /proc/self/stat, so that a watcher holding a pidfd
can tell the process from a later one that reused the pid) before it spins.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import signal
import struct
import subprocess
from pathlib import Path
from typing import Any, NamedTuple

from orbit_child import Execution, Handler

STAMP_BYTES = 64  # a cache line each, so the two writers never share one
SLOT_BYTES = 2 * STAMP_BYTES
CHILD, GRANDCHILD = 0, STAMP_BYTES
PID, START_TICKS, TURNS, FIRST_MONO_NS, MONO_NS, REAL_NS = (8 * i for i in range(6))
STAMP = struct.Struct("<qqqqqq")  # the six fields above, in order
ROLES = {"child": CHILD, "grandchild": GRANDCHILD}


class Stamp(NamedTuple):
    pid: int
    start_ticks: int
    turns: int  # 0: never spun
    first_mono_ns: int
    mono_ns: int  # the last turn's clocks
    real_ns: int


def read_stamp(page: Any, slot: int, role: str) -> Stamp:
    """One process's stamp from a mapped page (``role`` is "child" or "grandchild")."""
    return Stamp._make(STAMP.unpack_from(page, slot * SLOT_BYTES + ROLES[role]))

LIBRARY_NAME = "libkillspin.so"
C_SOURCE = r"""
#include <stdint.h>
#include <time.h>

/* Mirrors the field offsets in kill_spinner.py; pid and start_ticks are written by Python. */
struct stamp {
    int64_t pid, start_ticks, turns, first_mono_ns, mono_ns, real_ns;
};

static int64_t ns(const struct timespec *t) {
    return (int64_t)t->tv_sec * 1000000000 + t->tv_nsec;
}

/* Stamp both clocks on every turn until max_ns have passed on the monotonic clock. The
   stores are volatile so that none is kept in a register: a reader of the page after a
   SIGKILL sees the last turn that ran. */
int64_t spin_stamp(volatile struct stamp *s, int64_t max_ns) {
    struct timespec mono, real;
    clock_gettime(CLOCK_MONOTONIC, &mono);
    int64_t end = ns(&mono) + max_ns;
    int64_t turns = 0;
    s->first_mono_ns = ns(&mono);
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &mono);
        clock_gettime(CLOCK_REALTIME, &real);
        s->mono_ns = ns(&mono);
        s->real_ns = ns(&real);
        s->turns = ++turns;
        if (ns(&mono) >= end)
            return turns;
    }
}
"""


def build_library(workdir: Path) -> Path:
    """Compile the C spinner into ``workdir`` (gcc is on every machine of this project's
    kind) and return the library's path; the benchmark passes it in each task's payload."""
    source = workdir / "killspin.c"
    library = workdir / LIBRARY_NAME
    source.write_text(C_SOURCE)
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(library), str(source)],
                   check=True, capture_output=True, timeout=60)
    return library


def start_ticks(pid: int | str = "self") -> int:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22): with
    the pid it names one process, even after the pid is reused."""
    with open(f"/proc/{pid}/stat", "rb") as fh:
        stat = fh.read()
    # The command name (field 2) may hold spaces and parentheses: count from its end.
    return int(stat[stat.rindex(b")") + 2:].split()[19])


_libraries: dict[str, Any] = {}


def _spin_function(library: str) -> Any:
    """The library's ``spin_stamp``, loaded once per process."""
    if library not in _libraries:
        lib = ctypes.CDLL(library)
        lib.spin_stamp.argtypes = [ctypes.c_void_p, ctypes.c_int64]
        lib.spin_stamp.restype = ctypes.c_int64
        _libraries[library] = lib.spin_stamp
    return _libraries[library]


def _map_page(path: str) -> mmap.mmap:
    fd = os.open(path, os.O_RDWR)
    try:
        return mmap.mmap(fd, 0)
    finally:
        os.close(fd)


def _claim(page: mmap.mmap, offset: int) -> None:
    """Write this process's identity into its stamp, so the watcher can hold a pidfd on it
    from now on (even if it is killed before it reaches its spin)."""
    struct.pack_into("<qq", page, offset + PID, os.getpid(), start_ticks())


def _spin(page: mmap.mmap, offset: int, library: str, max_ns: int) -> int:
    """Spin in C, stamping at ``offset``, until killed or ``max_ns`` have passed."""
    address = ctypes.addressof(ctypes.c_char.from_buffer(page, offset))
    return int(_spin_function(library)(address, max_ns))


def _start_grandchild(page: mmap.mmap, offset: int, library: str, max_ns: int) -> None:
    """Fork a process into its own session (so a kill of the child's process group misses
    it) that stamps its own slot half; it leaves only by a kill or its bound."""
    if os.fork() != 0:
        return
    try:
        os.setsid()
        _claim(page, offset + GRANDCHILD)
        # Hold none of the child's descriptors (its socket to the supervisor above all), as
        # a subprocess started with close_fds would not: the page stays mapped without one.
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        _spin(page, offset + GRANDCHILD, library, max_ns)
    finally:
        os._exit(0)  # never back into the copy of the child's Python stack


def kill_spin(execution: Execution) -> Any:
    """payload: ``page`` (path), ``slot`` (index), ``library`` (path), ``grandchild``
    (bool), ``spin_ms`` (the bound of the C loop, far beyond the attempt timeout)."""
    p = execution.payload
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # inherited by the grandchild's fork too
    page = _map_page(p["page"])
    offset = int(p["slot"]) * SLOT_BYTES
    _claim(page, offset + CHILD)
    max_ns = int(p["spin_ms"]) * 1_000_000
    _spin_function(p["library"])  # loaded before the fork, so the grandchild has it too
    if p.get("grandchild"):
        _start_grandchild(page, offset, p["library"], max_ns)
    turns = _spin(page, offset + CHILD, p["library"], max_ns)
    return {"not_killed": True, "turns": turns}  # only reached if no kill came in time


def noop(execution: Execution) -> Any:
    return 1


handlers = [
    Handler("kill_spin", "1", "1", kill_spin),
    Handler("noop", "1", "1", noop),
]
