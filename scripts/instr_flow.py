#!/usr/bin/env python3
"""Instructions per task that flow control adds to the store's work, counted by callgrind.

    .venv/bin/python scripts/instr_flow.py [--tasks 4000] [--batch 1000] [--claim 256]
    .venv/bin/python scripts/instr_flow.py --pages [--tasks 8000]
    .venv/bin/python scripts/instr_flow.py --against limits   # or fair: one of the two alone
    .venv/bin/python scripts/instr_flow.py --server [--tasks 3000]   # the whole server

The same work as ``bench_server.py`` (a) without HTTP: the server's own use cases (services,
in process, a real SQLite file written as the server writes it, ``synchronous=NORMAL``):
tasks submitted in batches, then claimed ``--claim`` at a time by a worker whose grants
come with the dispatch, each claim's attempts finished in requests of MAX_BATCH_OPS. Once
plain, once with ``bench_server.py --limits --fair``'s keys and settings (every task a
``tenant:N`` key under a wildcard limit that never binds, and a ``customer:N`` key the
queue is fair by).

Each (mode, phase) runs in a process of its own under valgrind's callgrind with
instrumentation off except inside that phase's calls (``callgrind_control -i on|off``), so
the count is the instructions those calls executed (Python, SQLite, libc), whatever the
machine's load: a difference of a few percent between two commits is real here, where a
throughput run on this kind of host moves by ±15 %. It does not count the kernel's work
(the WAL's writes) nor cache misses, so it is a yardstick for CPU work, not a throughput
figure. Each switch runs a ``callgrind_control`` process and a little Python around it; a
calibration run measures that and it is subtracted. Needs ``valgrind`` (apt install
valgrind); a few minutes on two cores. docs/benchmarks.md records the figures.

``--server`` counts the whole server instead: a real ``orbit-server`` (its HTTP and WebSocket
layers, every thread) under callgrind, instrumented while ``bench_server.py``'s (a) runs
``--tasks`` tasks against it (after 500 untimed ones), plain and with the ``--against``
settings: the noise-free twin of the issue's throughput row, whose ratio moves by ±10 %
between runs here. Both servers run at once (one core each).

``--pages`` counts what callgrind cannot see: the pages each phase's commits write to the
WAL (each one a frame the kernel copies, checksummed by SQLite, later copied again by a
checkpoint), per B-tree (table or index, named through SQLite's ``dbstat``). The WAL is
emptied (``wal_checkpoint(TRUNCATE)``) before each counted call and its frames read after,
so each count is exactly that call's commit. No valgrind; seconds.
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import os
import random
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from wal_pages import frame_pages, trees  # noqa: E402

# What ``--against`` may compare with plain: both, or either alone (bench_server.py's
# --limits and --fair).
AGAINST = ("limits+fair", "limits", "fair")
PHASES = ("submit", "claim", "finish")
DEFAULT_TASKS = 4000
_TOTALS = re.compile(r"^totals:\s+(\d+)", re.MULTILINE)


class Switch:
    """Callgrind's instrumentation turned on and off around calls, counting the calls."""

    def __init__(self, active: bool) -> None:
        self.active = active
        self.calls = 0

    def _set(self, state: str) -> None:
        subprocess.run(["callgrind_control", "-i", state, str(os.getpid())],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)

    def around(self, call: Callable[[], Any]) -> Any:
        if not self.active:
            return call()
        self.calls += 1
        self._set("on")
        try:
            return call()
        finally:
            self._set("off")


class PageCount:
    """The WAL pages each call's commit wrote, by B-tree name, summed over calls."""

    def __init__(self, db_path: Path) -> None:
        self.db_path = db_path
        self.wal = Path(f"{db_path}-wal")
        self.side = sqlite3.connect(db_path)
        self.page_size = self.side.execute("PRAGMA page_size").fetchone()[0]
        self.pages: collections.Counter[str] = collections.Counter()

    def around(self, call: Callable[[], Any]) -> Any:
        self.side.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        result = call()
        self.pages += trees(self.db_path, frame_pages(self.wal.read_bytes()[32:],
                                                      self.page_size))
        return result


def child(mode: str, phase: str, tasks: int, batch: int, claim: int, out: Path) -> None:
    """One run of the work, counting ``phase`` (``calibrate``: empty switches only;
    ``pages``: the WAL pages of every phase, written to ``out`` as JSON)."""
    import server_harness as harness

    from orbit_host.heap import settle
    from orbit_server.config import ServerConfig
    from orbit_server.services import Services
    from orbit_server.store import create_engine_for, migrate
    from orbit_wire.frames import FinishOp, Hello
    from orbit_wire.limits import MAX_BATCH_OPS
    from orbit_wire.model import Outcome

    switches: dict[str, Any] = {name: Switch(name == phase) for name in PHASES}
    if phase == "calibrate":
        calibrate = Switch(True)
        for _ in range(64):
            calibrate.around(lambda: None)
        out.write_text(str(calibrate.calls))
        return
    with tempfile.TemporaryDirectory(prefix="orbit-instr-") as tmp:
        url = f"sqlite:///{tmp}/orbit.db"
        migrate(url)
        engine = create_engine_for(url, synchronous="NORMAL")
        if phase == "pages":
            switches = {name: PageCount(Path(tmp) / "orbit.db") for name in PHASES}
        now = [1_800_000_000_000]

        def clock() -> int:
            now[0] += 1
            return now[0]

        svc = Services(engine, ServerConfig(db_url=url), clock, random.Random(7))
        made = svc.admin.bootstrap_admin("root")
        admin = svc.admin.authenticate(f"{made['credential_id']}.{made['secret']}")
        queue = svc.admin.create_queue(admin, "q")["id"]
        prod = svc.admin.create_credential(admin, "producer", [queue], "p")
        producer = svc.admin.authenticate(f"{prod['credential_id']}.{prod['secret']}")
        work = svc.admin.create_credential(admin, "worker", [queue], "w")
        limited, fair = mode in ("limits+fair", "limits"), mode in ("limits+fair", "fair")
        harness.LIMITS.update(on=limited, fair=fair)
        if limited:
            svc.limits.set_limit(admin, queue, harness.LIMIT_PATTERN,
                                 harness.LIMIT_BODY)
        if fair:
            svc.fair.set_fair(admin, queue, harness.FAIR_BODY)
        worker = svc.workers.worker_hello(Hello(
            credential_id=work["credential_id"], credential_secret=work["secret"],
            instance_id="0" * 31 + "1", instance_secret="instance-secret", queue_id=queue,
            capabilities=(harness.CAP,), capacity=claim, features=("grant",)))
        settle()
        msgs = 0
        with svc.tx.pinned():  # the store thread's own connections, as in the server
            for start in range(0, tasks, batch):
                last = min(tasks, start + batch)
                specs: list[object] = [harness.spec(i) for i in range(start, last)]
                switches["submit"].around(functools.partial(svc.tasks.submit, producer,
                                                            queue, specs))
            done = 0
            while done < tasks:
                got = switches["claim"].around(lambda: svc.workers.reserve(worker, claim))
                if not got:
                    raise SystemExit(f"the claim came back empty after {done} tasks")
                for first in range(0, len(got), MAX_BATCH_OPS):
                    ops = [FinishOp(f"f{msgs + j}", r.attempt_id, r.epoch, Outcome.SUCCEEDED,
                                    result_json="1")
                           for j, r in enumerate(got[first:first + MAX_BATCH_OPS])]
                    msgs += len(ops)
                    results, _ = switches["finish"].around(functools.partial(
                        svc.workers.apply_ops, worker, ops))
                    if not all(r.ok for r in results):
                        raise SystemExit(f"a finish failed: {results[0]}")
                done += len(got)
        engine.dispose()
        if phase == "pages":
            out.write_text(json.dumps({name: dict(c.pages) for name, c in switches.items()}))
            return
    out.write_text(str(switches[phase].calls))


def server_counted(mode: str, tasks: int, workdir: Path) -> int:
    """Instructions per task of a whole ``orbit-server`` under callgrind while bench_server's
    (a) runs ``tasks`` tasks (mode as ``--against``), one process of this script each."""
    out = workdir / f"server-{mode}.json"
    subprocess.run([sys.executable, __file__, "--server-child", mode, "--tasks", str(tasks),
                    "--out", str(out)], check=True, timeout=3600)
    return int(json.loads(out.read_text())["per_task"])


def server_child(mode: str, tasks: int, out: Path) -> None:
    import asyncio

    import bench_server
    import server_harness as harness

    harness.LIMITS.update(on=mode in ("limits+fair", "limits"),
                               fair=mode in ("limits+fair", "fair"))
    with tempfile.TemporaryDirectory(prefix="orbit-instr-") as tmp:
        trace = Path(tmp) / "callgrind.out"
        server = harness.Server(
            Path(tmp), wrapper=("valgrind", "--tool=callgrind", "--instr-atstart=no",
                                f"--callgrind-out-file={trace}"),
            start_timeout_s=300)  # python under valgrind starts slowly
        server.start()
        proc = server.proc
        assert proc is not None
        try:
            admin = server.admin_bearer()
            asyncio.run(bench_server.throughput(server.url, admin, 500))  # warm, uncounted
            control = ["callgrind_control", "-i"]
            subprocess.run([*control, "on", str(proc.pid)], check=True, capture_output=True)
            asyncio.run(bench_server.throughput(server.url, admin, tasks))
            subprocess.run([*control, "off", str(proc.pid)], check=True, capture_output=True)
        finally:
            proc.terminate()  # callgrind writes its counts as the server exits: give it time
            try:
                proc.wait(120)
            finally:
                server.stop()
        found = _TOTALS.search(trace.read_text())
        if found is None:
            raise SystemExit(f"no totals in {trace}")
        out.write_text(json.dumps({"per_task": int(found.group(1)) / tasks}))


def counted(mode: str, phase: str, args: argparse.Namespace, workdir: Path) -> tuple[int, int]:
    """(instructions, switched calls) of one child run under callgrind."""
    base = workdir / f"{mode}-{phase}"
    cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
           f"--callgrind-out-file={base}.out", sys.executable, __file__, "--child", mode,
           phase, "--tasks", str(args.tasks), "--batch", str(args.batch),
           "--claim", str(args.claim), "--out", f"{base}.calls"]
    log = Path(f"{base}.log")
    with log.open("wb") as sink:
        done = subprocess.run(cmd, stdout=sink, stderr=subprocess.STDOUT, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"{mode} {phase} failed:\n{log.read_text()[-3000:]}")
    found = _TOTALS.search(Path(f"{base}.out").read_text())
    if found is None:
        raise SystemExit(f"no totals in {base}.out")
    return int(found.group(1)), int(Path(f"{base}.calls").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=DEFAULT_TASKS)
    parser.add_argument("--batch", type=int, default=1000, help="tasks per submit")
    parser.add_argument("--claim", type=int, default=256, help="tasks per claim")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--phase", choices=PHASES, action="append",
                        help="count only this phase (again for more; default: all)")
    parser.add_argument("--against", choices=AGAINST, default="limits+fair",
                        help="what to compare with plain (default: limits and fair)")
    parser.add_argument("--pages", action="store_true",
                        help="count WAL pages per B-tree instead of instructions")
    parser.add_argument("--server", action="store_true",
                        help="count a whole orbit-server under bench_server.py's (a) instead "
                        "(--tasks of them; default 3000)")
    parser.add_argument("--child", nargs=2, metavar=("MODE", "PHASE"), help=argparse.SUPPRESS)
    parser.add_argument("--server-child", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.child[1], args.tasks, args.batch, args.claim, args.out)
        return
    if args.server_child:
        server_child(args.server_child, args.tasks, args.out)
        return
    if args.pages:
        print_pages(args)
        return
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("needs valgrind (apt install valgrind)")
    if args.server:
        print_server(args)
        return
    phases = tuple(args.phase or PHASES)
    modes = ("plain", args.against)
    runs = [("plain", "calibrate")] + [(m, p) for m in modes for p in phases]
    with tempfile.TemporaryDirectory(prefix="orbit-instr-") as tmp, \
            ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = {run: pool.submit(counted, run[0], run[1], args, Path(tmp)) for run in runs}
        got = {run: f.result() for run, f in futures.items()}
    switch_cost = got[("plain", "calibrate")][0] / got[("plain", "calibrate")][1]
    per_task = {run: (total - calls * switch_cost) / args.tasks
                for run, (total, calls) in got.items() if run[1] != "calibrate"}
    print(f"instructions per task ({args.tasks} tasks, submits of {args.batch}, claims of "
          f"{args.claim}; one switch {switch_cost:,.0f} instructions, subtracted)")
    print(f"| phase | plain | {args.against} | added |")
    print("| --- | --- | --- | --- |")
    for phase in (*phases, "all"):
        summed = phases if phase == "all" else (phase,)
        plain = sum(per_task[("plain", p)] for p in summed)
        flow = sum(per_task[(args.against, p)] for p in summed)
        print(f"| {phase} | {plain:,.0f} | {flow:,.0f} | {flow - plain:+,.0f} "
              f"({(flow - plain) / plain:+.1%}) |")


def print_server(args: argparse.Namespace) -> None:
    """Both modes' whole-server instructions per task, and their ratio."""
    tasks = args.tasks if args.tasks != DEFAULT_TASKS else 3000
    modes = ("plain", args.against)
    with tempfile.TemporaryDirectory(prefix="orbit-instr-") as tmp, \
            ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = {m: pool.submit(server_counted, m, tasks, Path(tmp)) for m in modes}
        got = {m: f.result() for m, f in futures.items()}
    plain, flow = got["plain"], got[args.against]
    print(f"whole-server instructions per task ({tasks} tasks of bench_server.py (a))")
    print(f"| plain | {args.against} | added | plain / {args.against} |")
    print("| --- | --- | --- | --- |")
    print(f"| {plain:,.0f} | {flow:,.0f} | {flow - plain:+,.0f} ({(flow - plain) / plain:+.1%})"
          f" | {plain / flow:.3f} |")


def print_pages(args: argparse.Namespace) -> None:
    """Both modes' WAL pages per task, by phase and by B-tree (those that differ most
    first)."""
    got: dict[str, dict[str, dict[str, int]]] = {}
    with tempfile.TemporaryDirectory(prefix="orbit-pages-") as tmp:
        for mode in ("plain", args.against):
            out = Path(tmp) / f"{mode}.json"
            subprocess.run([sys.executable, __file__, "--child", mode, "pages", "--tasks",
                            str(args.tasks), "--batch", str(args.batch), "--claim",
                            str(args.claim), "--out", str(out)], check=True, timeout=1800)
            got[mode] = json.loads(out.read_text())
    print(f"WAL pages per task ({args.tasks} tasks, submits of {args.batch}, claims of "
          f"{args.claim})")
    print(f"| phase | B-tree | plain | {args.against} | added |")
    print("| --- | --- | --- | --- | --- |")
    for phase in PHASES:
        plain, flow = got["plain"][phase], got[args.against][phase]
        trees = sorted(set(plain) | set(flow),
                       key=lambda t: (-(flow.get(t, 0) - plain.get(t, 0)), t))
        for tree in ("all", *trees):
            a = sum(plain.values()) if tree == "all" else plain.get(tree, 0)
            b = sum(flow.values()) if tree == "all" else flow.get(tree, 0)
            if tree != "all" and a == b:
                continue
            print(f"| {phase} | {tree} | {a / args.tasks:.3f} | {b / args.tasks:.3f} | "
                  f"{(b - a) / args.tasks:+.3f} |")


if __name__ == "__main__":
    main()
