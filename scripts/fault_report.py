"""Regenerate docs/reports/fault-regression.md: every fault scenario on real processes, on
SQLite and MariaDB, and the chaos soak, in one run.

    .venv/bin/python scripts/fault_report.py                          # short: 1 run each
    .venv/bin/python scripts/fault_report.py --runs 10 --soak-seconds 600   # the long form
    .venv/bin/python scripts/fault_report.py --supervisor-args "--prefetch 1" \
        --out docs/reports/fault-regression-prefetch.md    # every supervisor with options

The scenarios are the ones tests/e2e/test_fault_scenarios.py runs (tests/support/
fault_scenarios.py: one implementation); each is run ``--runs`` times on a fresh queue of
one server per store. ``--soak-seconds`` runs scripts/soak.py that long on each store (0: not
run; the report says so). MariaDB comes from ``--mysql`` (default ORBIT_TEST_MYSQL_URL, else
mysql://root@127.0.0.1:3306/test); each scenario gets its own throw-away database
(tests/support/mariadb.py). Exits 0 when every row held, 1 otherwise; the report is written
either way, with every violation in it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests")]

from support.fault_scenarios import (  # noqa: E402  (the test tree's scenarios)
    PENDING,
    SCENARIOS,
    SUPERVISOR_ARGS_ENV,
    Ctx,
    Row,
    run_scenario,
    unavailable_row,
)
from support.invariants import CHECKS, TITLES, summary  # noqa: E402
from support.mariadb import MariaDBPool, unavailable_reason  # noqa: E402

SOAK = ROOT / "scripts" / "soak.py"
OUT = ROOT / "docs" / "reports" / "fault-regression.md"
DEFAULT_MYSQL = "mysql://root@127.0.0.1:3306/test"


# ------------------------------------------------------------------ running


def run_rows(names: list[str], stores: list[str], runs: int, pool: MariaDBPool | None,
             workdir: Path) -> list[Row]:
    rows = []
    for store in stores:
        for name in names:
            if store not in SCENARIOS[name].stores:
                continue  # e.g. two replicas on one database: MariaDB only
            url = pool.acquire() if store == "mariadb" and pool is not None else None
            print(f"fault_report: {name} on {store} ({runs} runs)", flush=True)
            try:
                row = run_scenario(name, Ctx(workdir / store / name, url, store, runs))
            except Exception as exc:  # a scenario that broke down is a failed row, shown
                row = Row(name, SCENARIOS[name].title, store)
                row.scenario_bad.append(f"the scenario broke down: {type(exc).__name__}: "
                                        f"{str(exc)[:1500]}")
            finally:
                if url is not None and pool is not None:
                    pool.release(url)
            print(f"fault_report:   {'held' if row.ok else 'FAILED'} in {row.seconds:.1f} s",
                  flush=True)
            if not row.ok:
                print(row.explain(), flush=True)
            rows.append(row)
        for name, (title, reason) in PENDING.items():
            rows.append(unavailable_row(name, title, store, reason))
    return rows


def run_soak(store: str, seconds: float, pool: MariaDBPool | None, workdir: Path,
             supervisor_args: str = "") -> dict[str, Any]:
    facts_file = workdir / f"soak-{store}.json"
    cmd = [sys.executable, str(SOAK), "--seconds", str(seconds), "--fault-every", "1.0",
           "--json", str(facts_file), "--supervisor-args", supervisor_args]
    url = pool.acquire() if store == "mariadb" and pool is not None else None
    if url is not None:
        cmd += ["--db", url]
    print(f"fault_report: soak on {store} for {seconds:.0f} s", flush=True)
    t0 = time.monotonic()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT,
                              timeout=seconds + 900)
    finally:
        if url is not None and pool is not None:
            pool.release(url)
    facts: dict[str, Any] = {"store": store, "exit": done.returncode,
                             "wall_s": round(time.monotonic() - t0, 1)}
    if facts_file.exists():
        facts |= json.loads(facts_file.read_text())
    else:
        facts["violations"] = [f"soak wrote no facts (exit {done.returncode}): "
                               f"{done.stdout[-1500:]}{done.stderr[-1500:]}"]
    return facts


# ------------------------------------------------------------------ the machine


def machine(mysql: str | None) -> dict[str, str]:
    cpu = "?"
    with open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    out = {"host": f"{platform.system()} {platform.release()} {platform.machine()}",
           "cpus": f"{os.cpu_count()} x {cpu}", "python": platform.python_version()}
    if mysql:
        try:
            from orbit_server.store.db import create_engine_for
            engine = create_engine_for(mysql)
            with engine.connect() as conn:
                out["mariadb"] = str(conn.exec_driver_sql("SELECT VERSION()").scalar())
            engine.dispose()
        except Exception as exc:  # shown in the report, not fatal to it
            out["mariadb"] = f"unknown ({type(exc).__name__})"
    return out


def git_commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], capture_output=True, text=True, cwd=ROOT,
                              timeout=30).stdout.strip()

    dirty = " (with uncommitted changes)" if git("status", "--porcelain", "--", ".") else ""
    return f"{git('rev-parse', '--short', 'HEAD')}{dirty}"


# ------------------------------------------------------------------ the report


def _cell(found: list[str]) -> str:
    return "held" if not found else f"**{len(found)} violated**"


def _latency_cell(row: Row) -> str:
    parts = []
    for label, values in row.latencies.items():
        s = summary(values)
        if s is not None:
            parts.append(f"{label}: p50 {s['p50']:+.0f}, max {s['max']:+.0f} (n={s['n']:.0f})")
    return "; ".join(parts) or "—"


def _faults_cell(row: Row) -> str:
    return ", ".join(f"{kind} x{n}" for kind, n in row.faults.items()) or "none"


def _accounting(soak: dict[str, Any]) -> str:
    a = soak.get("attempts")
    if not a:
        return "—"
    return (f"{a['started']}, {a['expired_unconfirmed']} ({a['expired_unconfirmed_run']}), "
            f"{a['claimed_never_ran']}" + ("" if a["checked"] else " (not checked: prefetch)"))


def render(rows: list[Row], soaks: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    held = all(r.ok for r in rows if r.unavailable is None) and not any(
        s.get("violations") for s in soaks)
    lines = [
        "# Fault regression report",
        "",
        "Orbit's safety promises checked from outside, with real `orbit-server`, "
        "`orbit-supervise` and child processes, on SQLite and MariaDB, while faults are "
        "injected. Generated by `scripts/fault_report.py`; do not edit by hand.",
        "",
        "## How this was generated",
        "",
        f"- Command: `{meta['command']}`",
        f"- Date (UTC): {meta['started']} → {meta['ended']} ({meta['wall_s']:.0f} s)",
        f"- Commit: {meta['commit']}",
        f"- Machine: {meta['machine']['host']}, {meta['machine']['cpus']}, "
        f"Python {meta['machine']['python']}"
        + (f", MariaDB {meta['machine']['mariadb']}" if "mariadb" in meta["machine"] else ""),
        f"- Load average (1 min) at the start and the end: {meta['load_start']:.2f}, "
        f"{meta['load_end']:.2f} (other work shared the machine: figures are from a busy "
        "host)" if max(meta["load_start"], meta["load_end"]) > (os.cpu_count() or 1) / 2
        else f"- Load average (1 min) at the start and the end: {meta['load_start']:.2f}, "
             f"{meta['load_end']:.2f}",
        f"- Runs per scenario and store: {meta['runs']}; stores: {', '.join(meta['stores'])}",
        f"- Soak: {meta['soak']}",
        f"- Result: **{'every promise held' if held else 'VIOLATIONS FOUND (see below)'}**",
        "",
        "Short form (what CI runs as tests, in `tests/e2e/test_fault_scenarios.py`):",
        "`.venv/bin/python scripts/fault_report.py`. Long form: "
        "`.venv/bin/python scripts/fault_report.py --runs 10 --soak-seconds 600` on a quiet "
        "machine.",
        "",
        "## Scenarios",
        "",
        "| scenario | store | runs | tasks | faults injected | "
        + " | ".join(TITLES[c] for c in CHECKS) + " | scenario checks | latencies (ms) |",
        "| --- | --- | ---: | ---: | --- | " + " | ".join("---" for _ in CHECKS)
        + " | --- | --- |",
    ]
    for r in rows:
        if r.unavailable is not None:
            lines.append(f"| {r.title} | {r.store} | — | — | — | "
                         + " | ".join("—" for _ in CHECKS)
                         + f" | not yet available: {r.unavailable} | — |")
            continue
        scenario_cell = ("held" if not r.scenario_bad else f"**{len(r.scenario_bad)} "
                         "violated**") + f" ({len(r.scenario_checks)})"
        if not sum(r.faults.values()):
            scenario_cell += "; **no fault injected**"
        lines.append(f"| {r.title} | {r.store} | {r.runs} | {r.tasks} | {_faults_cell(r)} | "
                     + " | ".join(_cell(r.checks[c]) for c in CHECKS)
                     + f" | {scenario_cell} | {_latency_cell(r)} |")
    lines += ["", "## Soak (`scripts/soak.py`)", ""]
    if not soaks:
        lines.append(f"Not run in this generation ({meta['soak']}).")
    else:
        lines += ["| store | seconds | seed | tasks | end states | faults | resent batches | "
                  "executions | attempts spent, grants expired unconfirmed (of them run), "
                  "claims never run | violations |",
                  "| --- | ---: | ---: | ---: | --- | --- | ---: | ---: | --- | --- |"]
        for s in soaks:
            bad = s.get("violations", [])
            lines.append(f"| {s['store']} | {s.get('seconds', '?')} | {s.get('seed', '?')} | "
                         f"{s.get('tasks', '?')} | {s.get('states', {})} | "
                         f"{s.get('faults', {})} | {s.get('resent_batches', '?')} | "
                         f"{s.get('executions', '?')} | {_accounting(s)} | "
                         f"{'none' if not bad else f'**{len(bad)}**'} |")
    lines += ["", "## What each scenario does and checks", ""]
    seen: set[str] = set()
    for r in rows:
        if r.unavailable is not None or r.scenario in seen:
            continue
        seen.add(r.scenario)
        doc = (SCENARIOS[r.scenario].body.__doc__ or "").strip().split("\n\n")[0]
        lines += [f"### {r.title} (`{r.scenario}`)", "", " ".join(doc.split()), ""]
        lines += [f"- checked: {name}" for name in r.scenario_checks]
        lines.append("")
    lines += ["## Latencies in detail (ms)", "",
              "| scenario | store | measure | n | p50 | p99 | max |",
              "| --- | --- | --- | ---: | ---: | ---: | ---: |"]
    for r in rows:
        for label, values in r.latencies.items():
            figures = summary(values)
            if figures is not None:
                lines.append(f"| {r.scenario} | {r.store} | {label} | {figures['n']:.0f} | "
                             f"{figures['p50']:+.0f} | {figures['p99']:+.0f} | "
                             f"{figures['max']:+.0f} |")
    failures = [r for r in rows if r.unavailable is None and not r.ok]
    notes = [(r, n) for r in rows for n in r.notes]
    if failures or notes or any(s.get("violations") for s in soaks):
        lines += ["", "## Violations and notes", ""]
        for r in failures:
            lines += [f"### {r.scenario} on {r.store}", "", "```text", r.explain(), "```", ""]
        for r, note in notes:
            lines.append(f"- {r.scenario} on {r.store}: {note}")
        for s in soaks:
            for v in s.get("violations", [])[:30]:
                lines.append(f"- soak on {s['store']}: {v}")
    lines += ["", "## Method", "", METHOD, ""]
    return "\n".join(lines)


METHOD = """\
Each run starts on a fresh queue; the handler is `sup.journal`
(tests/fixtures_handlers/supervisor_handlers.py), which writes a start line (task, attempt,
epoch, pid, wall-clock ms) to a journal, stamps the wall-clock time into a per-attempt file
every 5 ms while it runs, and journals the exact result it returns. After the run every task
must end (60 s bound), and the server's record (task views, attempt histories and evidence,
audit) is checked against the journal (tests/support/invariants.py):

- *one state per task*: every task ended, SUCCEEDED exactly when one attempt's accepted
  outcome is SUCCEEDED, and as its policy (or the scenario) says: IDEMPOTENT ends SUCCEEDED,
  a NON_IDEMPOTENT task that ran under an uncertain fault ends NEEDS_REVIEW;
- *no attempt ran twice*: one start line per attempt; a NON_IDEMPOTENT task ran at most once;
- *confirmed start, within lease*: no handler began before the server recorded its start,
  none stamped after the server's lease end of its attempt, and no two attempts of a task
  overlapped;
- *no stale report taken*: a SUCCEEDED result came from the task's newest epoch and was
  reported before that attempt's lease end;
- *results match journal*: every SUCCEEDED result equals the journaled one.

The cut and lost-answer scenarios put a TCP proxy that reads the (uncompressed) WebSocket
frames between supervisor and server (tests/support/ws_tap.py): it drops the first request
holding the op (a cut during it), or lets it through and drops the response that answers it
(a lost answer), and cuts the connection. It records every op the server received and every
answer, so the row checks that the lost op came again with its original `msg_id`, that every
answer to one `msg_id` was the same (the receipt: a replay may differ only in the remaining
`lease_ms` and a resent claim's credit), that the audit has at most one `attempt_started` and
`attempt_finished` per attempt, and that each attempt's renewal count equals the renew
`msg_id`s the server answered ok.

The grant scenarios (leases granted with the dispatch, docs/protocol.md "Grants") use the same
tap on the server's frames: it drops a `reserve` frame and cuts (the grant never read), holds
it past its lease and then delivers it or cuts, holds a worker heartbeat, or loses the answer
to a `decline` or a `resume`. Their rows check, for each grant the fault hit, that its
handler never ran, that it went back unspent (attempt `RELEASED`, rule `grant_declined` or
`grant_unreceived`, one audit event) and that its task then ran once as attempt 1 of 1 spent;
that a resume listed each running grant and its finish was `ACCEPTED`; after a SIGKILL of
`orbit-supervise`, that `orbit_grants_expired_unconfirmed_total` equals the expired grants
the server never heard the worker speak of (no renew, finish, decline or resume entry: the
tap saw every op); that two replicas sharing a database never grant to a replaced
connection; and that a cancel, a drain or a revocation racing a grant leaves no grant to
run on unchecked (killed for the cancel, run and reported before the drain, none made after
the revocation).

Latencies: *last instruction - lease end* is a killed handler's last stamp minus the server's
recorded lease end (negative: it stopped before the lease ran out; the local expiry is at least
the 50 ms report margin before it); *kill logged - lease end* is the supervisor's log line of
the kill (written just after the SIGKILL) against the same end; *SIGKILL → whole tree gone*
polls every child and grandchild with psutil every 2 ms after `orbit-supervise` is SIGKILLed;
*child SIGKILL → attempt closed* is the attempt's recorded end minus the instant of the kill;
*cut -> reconnected* runs from the tap's cut to the supervisor's next "connected to" log line.
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=1, help="runs of each scenario per store")
    parser.add_argument("--stores", default="sqlite,mariadb")
    parser.add_argument("--only", default="", help="comma-separated scenario names")
    parser.add_argument("--mysql", default=os.environ.get("ORBIT_TEST_MYSQL_URL",
                                                          DEFAULT_MYSQL))
    parser.add_argument("--soak-seconds", type=float, default=0.0,
                        help="run scripts/soak.py this long on each store (0: not run)")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--json", type=Path, default=None, help="also write the rows as JSON")
    parser.add_argument("--supervisor-args", default="",
                        help='options for every orbit-supervise (the scenarios\' and the '
                             'soak\'s), e.g. "--prefetch 1"')
    args = parser.parse_args()
    if args.supervisor_args:
        os.environ[SUPERVISOR_ARGS_ENV] = args.supervisor_args
    names = [n for n in args.only.split(",") if n] or list(SCENARIOS)
    unknown = sorted(set(names) - set(SCENARIOS))
    if unknown:
        parser.error(f"unknown scenarios {unknown}; known: {sorted(SCENARIOS)}")
    stores = [s for s in args.stores.split(",") if s]
    pool = None
    if "mariadb" in stores:
        os.environ["ORBIT_TEST_MYSQL_URL"] = args.mysql
        reason = unavailable_reason()
        if reason is not None:
            parser.error(f"MariaDB cannot be used: {reason} (or pass --stores sqlite)")
        pool = MariaDBPool(args.mysql)
    started = datetime.now(UTC)
    load_start = os.getloadavg()[0]
    t0 = time.monotonic()
    soaks: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="orbit-fault-report-") as tmp:
            rows = run_rows(names, stores, args.runs, pool, Path(tmp))
            if args.soak_seconds > 0:
                soaks = [run_soak(store, args.soak_seconds, pool, Path(tmp),
                                  args.supervisor_args)
                         for store in stores]
    finally:
        if pool is not None:
            pool.close()
    meta = {"command": shlex.join(["scripts/fault_report.py", *sys.argv[1:]]),
            "started": started.strftime("%Y-%m-%d %H:%M"),
            "ended": datetime.now(UTC).strftime("%H:%M"), "wall_s": time.monotonic() - t0,
            "commit": git_commit(), "machine": machine(args.mysql if pool else None),
            "load_start": load_start, "load_end": os.getloadavg()[0], "runs": args.runs,
            "stores": stores,
            "soak": (f"{args.soak_seconds:.0f} s on each store" if args.soak_seconds > 0
                     else "not run (--soak-seconds 0)")}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render(rows, soaks, meta) + "\n")
    if args.json is not None:
        args.json.write_text(json.dumps({"meta": meta, "soak": soaks, "rows": [
            {"scenario": r.scenario, "store": r.store, "runs": r.runs, "tasks": r.tasks,
             "faults": dict(r.faults), "checks": r.checks, "scenario_checks": r.scenario_checks,
             "scenario_violations": r.scenario_bad, "latencies_ms": r.latencies,
             "notes": r.notes, "unavailable": r.unavailable, "ok": r.ok} for r in rows]},
            indent=1))
    failed = [r for r in rows if r.unavailable is None and not r.ok]
    bad_soak = [s for s in soaks if s.get("violations") or s.get("exit")]
    print(f"fault_report: wrote {args.out}; {len(rows)} rows, {len(failed)} failed, "
          f"soak runs with violations: {len(bad_soak)}", flush=True)
    return 1 if failed or bad_soak else 0


if __name__ == "__main__":
    sys.exit(main())
