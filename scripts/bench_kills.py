#!/usr/bin/env python3
"""Measure attempt-timeout kills from outside the supervisor (issue 13, item 3).

    .venv/bin/python scripts/bench_kills.py [--kills 300] [--busy 0,2,4] [--no-write]
    .venv/bin/python scripts/bench_kills.py --quick --no-write      # a smoke run, ~20 s

A real `orbit-server` (temporary SQLite file) and, per load level, a fresh queue and one
`orbit-supervise --workers 4 kill_spinner:handlers` process. Each task (NON_IDEMPOTENT,
max_attempts 1, attempt_timeout_ms 300, lease TTL 10 s so the attempt timeout ends the
lease) runs ``kill_spin`` (scripts/kill_spinner.py): it ignores SIGTERM, starts a setsid
grandchild, and both spin in one C call that stamps CLOCK_MONOTONIC and CLOCK_REALTIME into
their slot of a shared page (/dev/shm) on every turn, so only a SIGKILL ends them.
A separate watcher process (scripts/kill_watcher.py) opens a pidfd for every pid the
page reports and records the instant each process is gone. Levels run with N extra busy
loops (``--busy``) spinning on the cores meanwhile.

Per level it reports, against the server's recorded lease end of each attempt
(``lease_expires_at_ms`` from GET /v1/tasks/{id}/attempts):
  - last handler stamp - lease end (child, grandchild): p50/p99/max, and how many are after;
  - process gone - lease end (child, grandchild): p50/p99/max, and the share gone before;
  - the share of kill records lacking their facts (kill_reason, signal, child_pid, cpu_ms,
    peak_rss_bytes), the outcome/code breakdown, and the evidence rows;
  - the server's recorded kill instant - lease end (kill_after_lease_end_ms) and the
    supervisor's SIGKILL -> reap (reap_ms), p50/p99/max; attempts that never ran (start
    answered after the local expiry); from the supervisor's log, its late kills (a lease
    timer > 20 ms late), its largest event-loop lag and its margin at the drain;
beside the issue's targets for load <= 3 (the extra load: runnable tasks other than the
benchmark's own Orbit processes and its watcher, busy loops included; see LoadSampler).
The kill-bench section of docs/benchmarks.md (between its markers) is replaced unless
--no-write or --quick. Every process started here is stopped by PID, also on error, and
every wait is bounded.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(SCRIPTS))

import kill_spinner as spinner  # noqa: E402
from kill_watcher import map_page, shm_page  # noqa: E402
from kills_report import (  # noqa: E402
    ATTEMPT_TIMEOUT_MS,
    BEGIN,
    END,
    FACTS,
    LEASE_TTL_MS,
    render,
)
from server_harness import (  # noqa: E402
    Server,
    pct,
    python_loop_ms,
    replace_section,
    stop_process,
)
from supervisor_harness import Env, submit_all  # noqa: E402

SPEC = "kill_spinner:handlers"
WORKERS = 4
SPIN_MS = 10_000  # the C loop's own bound, if no kill ever comes
QUICK_KILLS = 16
ROLES = ("child", "grandchild")
BUSY_SETTLE_S = 1.0  # let the busy loops take the cores before the first kill task
POLL_S = 0.1
EVIDENCE_WAIT_S = 5.0  # a late report lands as evidence some ms after the reaper's close
BUSY_CODE = ("import sys, time\n"
             "end = time.monotonic() + float(sys.argv[1])\n"
             "while time.monotonic() < end:\n"
             "    pass\n")


# ------------------------------------------------------------------ processes

def start_supervise(creds_path: Path, queue: str, log: Path,
                    workers: int, child_nice: int) -> subprocess.Popen[bytes]:
    """One `orbit-supervise` for the kill spinner (the template imports it from scripts/)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(SCRIPTS), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    with log.open("wb") as out:
        return subprocess.Popen(
            [str(ROOT / ".venv" / "bin" / "orbit-supervise"), "--credentials-file",
             str(creds_path), "--queue", queue, "--workers", str(workers),
             "--child-nice", str(child_nice),
             "--log-level", "info", SPEC],
            stdout=out, stderr=subprocess.STDOUT, env=env)


def start_busy_loops(count: int, seconds: float) -> list[subprocess.Popen[bytes]]:
    """``count`` plain Python loops, each bounded by ``seconds`` in case we never stop it."""
    return [subprocess.Popen([sys.executable, "-c", BUSY_CODE, str(seconds)])
            for _ in range(count)]


# ------------------------------------------------------------------ the watcher process

def start_watcher(page: Path, slots: int, roles: tuple[str, ...], seconds: float,
                  policy: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPTS / "kill_watcher.py"), str(page), str(slots),
         ",".join(roles), str(seconds), policy], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 30)
    if not ready or proc.stdout.readline().strip() != b"ready":
        stop_process(proc, signal.SIGKILL)
        raise SystemExit("the watcher did not start")
    return proc


def finish_watcher(proc: subprocess.Popen[bytes]) -> dict[str, Any]:
    """Close its stdin (its signal to finish: it then kills what survived) and read its
    report; a no-op once it has finished. SIGKILLed if it does not finish in time."""
    if proc.returncode is not None:
        return {}
    try:
        out, _ = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        stop_process(proc, signal.SIGKILL)
        raise SystemExit("the watcher did not finish") from None
    return dict(orjson.loads(out.strip().splitlines()[-1]))


# ------------------------------------------------------------------ the server's side

def kill_spec(slot: int, page: Path, library: Path, grandchild: bool) -> dict[str, Any]:
    return {"handler": "kill_spin", "handler_version": "1", "payload_version": "1",
            "payload": {"page": str(page), "slot": slot, "library": str(library),
                        "grandchild": grandchild, "spin_ms": SPIN_MS},
            "idempotency": "NON_IDEMPOTENT", "max_attempts": 1,
            "attempt_timeout_ms": ATTEMPT_TIMEOUT_MS, "lease_ttl_ms": LEASE_TTL_MS}


def noop_spec(i: int) -> dict[str, Any]:
    return {"handler": "noop", "handler_version": "1", "payload_version": "1",
            "payload": {"i": i}, "idempotency": "IDEMPOTENT"}


def runnable_now() -> int:
    """Runnable tasks on the host this instant (/proc/loadavg's fourth field, less this
    process): what the load average averages, without its minute-long lag."""
    with open("/proc/loadavg") as fh:
        return int(fh.read().split()[3].split("/")[0]) - 1


def runnable_in_trees(roots: list[int], limit: int = 512) -> int:
    """Runnable threads in the process trees under ``roots`` (walked through /proc's
    children lists; at most ``limit`` processes). Threads, as /proc/loadavg counts them."""
    count, todo = 0, list(roots)
    seen: set[int] = set()
    while todo and len(seen) < limit:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        with contextlib.suppress(OSError):  # gone meanwhile
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/stat", "rb") as fh:
                    stat = fh.read()
                state = stat[stat.rindex(b")") + 2:].split(maxsplit=1)[0]  # after the name
                count += 1 if state == b"R" else 0
                with open(f"/proc/{pid}/task/{tid}/children") as fh:
                    todo += [int(child) for child in fh.read().split()]
    return count


@dataclass
class LoadSampler:
    """Samples how loaded the host is while the kills run, in two figures: every runnable
    task, and the *extra* load, i.e. those outside the benchmark's own Orbit processes
    (server, supervisor, template, children, grandchildren) and the watcher. The spinners
    alone keep about 2 x --workers tasks runnable, so the load the issue's targets speak of
    (<= 3, on top of that work) is the extra one; the busy loops count in it, as other
    work on the host does."""

    roots: list[int]  # server, supervisor, watcher
    total: list[int] = field(default_factory=list)
    extra: list[int] = field(default_factory=list)

    def sample(self) -> None:
        all_now = runnable_now()
        self.total.append(all_now)
        self.extra.append(max(0, all_now - runnable_in_trees(self.roots)))


def wait_queue(producer: httpx.Client, queue: str, done: Callable[[dict[str, int]], bool],
               deadline: float, on_poll: Callable[[], None] | None = None) -> None:
    """Poll the queue's counts until ``done`` says so, or fail at ``deadline``."""
    counts: dict[str, int] = {}
    while time.monotonic() < deadline:
        counts = producer.get(f"/v1/queues/{queue}/stats").json()["counts"]
        if done(counts):
            return
        if on_poll is not None:
            on_poll()
        time.sleep(POLL_S)
    raise SystemExit(f"timed out waiting on queue {queue}: {counts}")


def settled(total: int) -> Callable[[dict[str, int]], bool]:
    def check(counts: dict[str, int]) -> bool:
        busy = counts.get("PENDING", 0) + counts.get("RUNNING", 0)
        return busy == 0 and sum(counts.values()) >= total
    return check


def fetch_attempts(producer: httpx.Client, ids: list[str]) -> list[dict[str, Any]]:
    """Every task's attempts and evidence. A kill record without its facts normally has
    an evidence row from the late report; wait a bounded while for those to land."""
    records = [producer.get(f"/v1/tasks/{tid}/attempts").json() for tid in ids]
    deadline = time.monotonic() + EVIDENCE_WAIT_S
    while time.monotonic() < deadline:
        waiting = [i for i, r in enumerate(records)
                   if r["attempts"] and not has_facts(r["attempts"][0]) and not r["evidence"]]
        if not waiting:
            break
        time.sleep(POLL_S)
        for i in waiting:
            records[i] = producer.get(f"/v1/tasks/{ids[i]}/attempts").json()
    return records


def has_facts(attempt: dict[str, Any]) -> bool:
    return all(attempt.get(name) is not None for name in FACTS)


# ------------------------------------------------------------------ one load level

@dataclass
class Level:
    busy: int
    kills: int
    records: list[dict[str, Any]]  # GET /v1/tasks/{id}/attempts, by slot
    stamps: list[dict[str, spinner.Stamp]]  # by slot, then role
    watch: dict[str, Any]
    load: LoadSampler
    load_before: float
    load_end: float
    supervise_exit: int | None
    supervise_log: str = ""


def run_level(env: Env, busy: int, kills: int, library: Path, args: argparse.Namespace) -> Level:
    """One fresh queue and supervisor, ``busy`` busy loops, ``kills`` kill tasks."""
    roles = ROLES if args.grandchild else ("child",)
    queue, producer, creds_path, _ = env.new_queue(f"kills-busy{busy}")
    budget = 60.0 + kills * 0.5  # 300 ms each on 4 slots, with room for a loaded host
    with shm_page(kills, f"busy{busy}") as page, contextlib.ExitStack() as stack:
        stack.callback(producer.close)
        watcher = start_watcher(page, kills, roles, budget + 60, args.watcher_sched)
        stack.callback(finish_watcher, watcher)  # on error too: it kills what survived
        sup = start_supervise(creds_path, queue, env.workdir / f"supervise-busy{busy}.log",
                              args.workers, args.child_nice)
        stack.callback(stop_process, sup)
        deadline = time.monotonic() + budget
        warm = 2 * args.workers  # connected, and every child forked and served once
        submit_all(producer, queue, [noop_spec(i) for i in range(warm)])
        wait_queue(producer, queue, lambda c: c.get("SUCCEEDED", 0) >= warm, deadline)
        load_before = os.getloadavg()[0]
        assert env.server.proc is not None
        load = LoadSampler([env.server.proc.pid, sup.pid, watcher.pid])
        with contextlib.ExitStack() as loops:
            for proc in start_busy_loops(busy, budget):
                loops.callback(stop_process, proc)
            time.sleep(BUSY_SETTLE_S)
            ids = submit_all(producer, queue, [kill_spec(i, page, library, args.grandchild)
                                               for i in range(kills)])
            wait_queue(producer, queue, settled(kills + warm), deadline,
                       load.sample)
            load_end = os.getloadavg()[0]
        records = fetch_attempts(producer, ids)
        supervise_exit = stop_process(sup)
        supervise_log = (env.workdir / f"supervise-busy{busy}.log").read_text(errors="replace")
        watch = finish_watcher(watcher)
        view = map_page(page)
        stamps = [{role: spinner.read_stamp(view, i, role) for role in ROLES}
                  for i in range(kills)]
        view.close()
    return Level(busy, kills, records, stamps, watch, load, load_before, load_end,
                 supervise_exit, supervise_log)


# ------------------------------------------------------------------ analysis

def ms_after(real_ns: int, lease_end_ms: int) -> float:
    """``real_ns`` (CLOCK_REALTIME) minus the server's lease end, in ms. The server's clock
    is the same CLOCK_REALTIME (time.time_ns() // 10**6) and it holds a lease while
    now_ms < lease_expires_at_ms, i.e. until the instant lease_expires_at_ms * 10**6 ns."""
    return (real_ns - lease_end_ms * 1_000_000) / 1e6


def mean(values: list[int]) -> float | None:
    return sum(values) / len(values) if values else None


def dist(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {"n": len(values), "min": min(values), "p50": pct(values, 0.5),
            "p99": pct(values, 0.99), "max": max(values)}


def label(row: dict[str, Any]) -> str:
    return f"{row.get('outcome')}/{row.get('code')}"


def analyse(level: Level) -> dict[str, Any]:
    """Figures of one level, from the server's records, the page and the watcher."""
    events = {(e["slot"], e["role"]): e for e in level.watch["events"]}
    out: dict[str, Any] = {"busy": level.busy, "tasks": level.kills}
    attempts = [r["attempts"][0] if r["attempts"] else None for r in level.records]
    killed = [(i, a) for i, a in enumerate(attempts)
              if a is not None and a.get("outcome") == "UNKNOWN"
              and a.get("lease_expires_at_ms") is not None]
    out["kills"] = len(killed)
    out["labels"] = dict(Counter(label(a) if a else "no attempt" for a in attempts))
    out["kill_reasons"] = dict(Counter(str(a.get("kill_reason")) for _, a in killed))
    out["pid_mismatch"] = sum(1 for i, a in killed if a.get("child_pid") is not None
                              and a["child_pid"] != level.stamps[i]["child"].pid)
    lacking = [a for _, a in killed if not has_facts(a) and not never_ran(a)]
    out["lacking"] = len(lacking)
    out["lacking_labels"] = dict(Counter(label(a) for a in lacking))
    evidence = [(e, a) for i, a in killed for e in level.records[i]["evidence"]]
    out["evidence_labels"] = dict(Counter(f"{label(e)} ({e.get('reason')})"
                                          for e, _ in evidence))
    out["evidence_ms"] = dist([float(e["received_at_ms"] - a["lease_expires_at_ms"])
                               for e, a in evidence])
    out["closed_ms"] = dist([float(a["finished_at_ms"] - a["lease_expires_at_ms"])
                             for _, a in killed if a.get("finished_at_ms") is not None])
    for role in ROLES:
        out[role] = role_figures(level, killed, events, role)
    out["handler_after"] = sum(
        1 for i, a in killed
        if any(s.turns > 0 and ms_after(s.real_ns, a["lease_expires_at_ms"]) >= 0
               for s in level.stamps[i].values()))
    out["clock_offset_spread_us"] = clock_offset_spread_us(level)
    out["runnable"] = mean(level.load.total)
    out["extra_load"] = mean(level.load.extra)
    out["load_before"], out["load_end"] = level.load_before, level.load_end
    out["watcher"] = {"sched": level.watch["sched"], "lag_us": level.watch["lag_us"],
                      "unseen": level.watch["unseen"]}
    out["supervise_exit"] = level.supervise_exit
    out["never_ran"] = sum(1 for _, a in killed if never_ran(a))
    out["kill_vs_lease_ms"] = dist([float(a["kill_after_lease_end_ms"]) for _, a in killed
                                    if a.get("kill_after_lease_end_ms") is not None])
    out["kills_after_lease_end"] = sum(1 for _, a in killed
                                       if (a.get("kill_after_lease_end_ms") or -1) >= 0)
    out["reap_ms"] = dist([float(a["reap_ms"]) for _, a in killed
                           if a.get("reap_ms") is not None])
    out.update(supervise_figures(level.supervise_log))
    return out


def never_ran(attempt: dict[str, Any]) -> bool:
    """Started, but the start's answer came after the local expiry: no child ran it."""
    return (attempt.get("kill_reason") == "LEASE_LOST" and attempt.get("child_pid") is None
            and attempt.get("signal") is None)


def supervise_figures(log: str) -> dict[str, Any]:
    """Late kills (logged one a line) and the drain line's loop lag and margin."""
    late = log.count("(a late kill")
    match = re.search(r"late_kills=(\d+) loop_lag_max_ms=([\d.]+) margin_ms=([\d.]+)", log)
    return {"late_kills": late,
            "loop_lag_max_ms": float(match.group(2)) if match else None,
            "margin_ms": float(match.group(3)) if match else None}


def role_figures(level: Level, killed: list[tuple[int, dict[str, Any]]],
                 events: dict[tuple[int, str], dict[str, Any]], role: str) -> dict[str, Any]:
    """Last stamp and exit of the child or the grandchild, against each kill's lease end."""
    stamp_ms: list[float] = []
    gone_ms: list[float] = []
    exit_ms: list[float] = []  # process gone - its last stamp, on the monotonic clock
    status: Counter[str] = Counter()
    for i, attempt in killed:
        stamp = level.stamps[i][role]
        end = attempt["lease_expires_at_ms"]
        if stamp.turns > 0:
            stamp_ms.append(ms_after(stamp.real_ns, end))
        event = events.get((i, role))
        status[event["status"] if event else "unseen"] += 1
        if event and event["status"] == "gone":
            gone_ms.append(ms_after(event["real_ns"], end))
            if stamp.turns > 0:
                exit_ms.append((event["mono_ns"] - stamp.mono_ns) / 1e6)
    return {"stamp_ms": dist(stamp_ms), "stamped_after": sum(1 for v in stamp_ms if v >= 0),
            "never_spun": len(killed) - len(stamp_ms),
            "gone_ms": dist(gone_ms), "gone_before": sum(1 for v in gone_ms if v < 0),
            "exit_after_stamp_ms": dist(exit_ms), "status": dict(status)}


def raw_rows(level: Level) -> list[dict[str, Any]]:
    """One row per task: what the server recorded, the page's stamps, the watcher's events."""
    events = {(e["slot"], e["role"]): e for e in level.watch["events"]}
    return [{"slot": i, **record,
             "stamps": {role: stamp._asdict() for role, stamp in level.stamps[i].items()},
             "watcher": {role: events.get((i, role)) for role in ROLES}}
            for i, record in enumerate(level.records)]


def clock_offset_spread_us(level: Level) -> float:
    """How much CLOCK_REALTIME - CLOCK_MONOTONIC moved over the level (every stamp and
    watcher event reads both back to back). Near 0 means the wall clock was not stepped,
    so wall-clock differences against the server's lease ends are as good as monotonic."""
    offsets = [s.real_ns - s.mono_ns for row in level.stamps for s in row.values()
               if s.turns > 0]
    offsets += [e["real_ns"] - e["mono_ns"] for e in level.watch["events"]
                if e["status"] == "gone"]
    return (max(offsets) - min(offsets)) / 1e3 if offsets else 0.0


# ------------------------------------------------------------------ main

def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kills", type=int, default=None,
                        help="kill tasks per load level (default 300; --quick: 16)")
    parser.add_argument("--busy", default="0,2,4",
                        help="comma-separated numbers of extra busy loops, one level each")
    parser.add_argument("--workers", type=int, default=WORKERS)
    parser.add_argument("--child-nice", type=int, default=10,
                        help="orbit-supervise --child-nice (0: children at its priority)")
    parser.add_argument("--quick", action="store_true",
                        help="a small smoke run; its figures are never written to docs/")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--no-grandchild", dest="grandchild", action="store_false")
    parser.add_argument("--watcher-sched", choices=("fifo", "other"), default="fifo")
    parser.add_argument("--raw", type=Path, help="also write every kill's records, stamps "
                        "and watcher events to this JSON file (for tracing single kills)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the work directory (server and supervisor logs)")
    args = parser.parse_args()
    if args.kills is None:
        args.kills = QUICK_KILLS if args.quick else 300
    args.busy_levels = [int(x) for x in args.busy.split(",") if x.strip()]
    if args.kills < 1 or any(n < 0 for n in args.busy_levels) or not args.busy_levels:
        parser.error("--kills must be >= 1 and --busy a list of numbers >= 0")
    return args


def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    result: dict[str, Any] = {"load_before": os.getloadavg()[0], "loop_ms": python_loop_ms(),
                              "kills": args.kills, "workers": args.workers,
                              "child_nice": args.child_nice,
                              "quick": args.quick}
    library = spinner.build_library(workdir)
    server = Server(workdir)
    server.start()
    try:
        env = Env(server, server.admin_bearer(), workdir)
        figs, raw = [], []
        for busy in args.busy_levels:
            level = run_level(env, busy, args.kills, library, args)
            figs.append(analyse(level))
            raw.append({"busy": busy, "kills": raw_rows(level)})
            print(f"busy {busy}: {orjson.dumps(figs[-1]).decode()}", flush=True)
    finally:
        server.stop()
    if args.raw is not None:
        args.raw.write_bytes(orjson.dumps(raw, option=orjson.OPT_INDENT_2))
    result["levels"] = figs
    result["load_after"] = os.getloadavg()[0]
    result["when"] = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return result


def stop_on_signal(signum: int, _frame: Any) -> None:
    raise SystemExit(f"stopped by signal {signum}")  # unwinds: everything started is stopped


def main() -> None:
    signal.signal(signal.SIGTERM, stop_on_signal)
    args = parse_args()
    if args.keep:
        workdir = Path(tempfile.mkdtemp(prefix="orbit-bench-kills-"))
        print(f"work directory kept: {workdir}", flush=True)
        result = run(args, workdir)
    else:
        with tempfile.TemporaryDirectory(prefix="orbit-bench-kills-") as tmp:
            result = run(args, Path(tmp))
    section = render(result)
    print(section)
    if not args.no_write and not args.quick:
        replace_section(ROOT / "docs" / "benchmarks.md", section, BEGIN, END)


if __name__ == "__main__":
    main()
