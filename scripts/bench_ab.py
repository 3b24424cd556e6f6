#!/usr/bin/env python3
"""Run scripts/bench_server.py at two checkouts, interleaved, and print them side by side.

    .venv/bin/python scripts/bench_ab.py --before ../orbit-before [--after .] [--rounds 3]
                                         [--db mysql://root@127.0.0.1:3306/orbit_ab]

Each checkout must have its own `.venv` with the project installed (`scripts/_venv.sh`);
each runs its own copy of the benchmark (``--no-write``) against its own server, in the
order before, after, after, before, ... so a drift of the host hits both sides alike (with
``--db`` the database is dropped and created again before each run: each side migrates its
own schema). The figures are the benchmark's (a) completions/s and its submits' own rate,
(b) submit -> reserve and (c) submit-and-wait p50/p99, read off its printed table; the table
printed here is ready for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROW_A = re.compile(r"\| \(a\)[^|]*\| \*\*(\d+)/s\*\*")
# (a)'s submits on their own: the batch submits' rate while the worker runs beside them.
SUBMITS = re.compile(r"submits alone (\d+)/s")
# Each store's table bolds the figure its target is on (SQLite (c), MariaDB (b)).
ROW_B = re.compile(r"\| \(b\)[^|]*\| p50 (?:\*\*)?([\d.]+) ms(?:\*\*)?, p99 ([\d.]+) ms")
ROW_C = re.compile(r"\| \(c\)[^|]*\| p50 (?:\*\*)?([\d.]+) ms(?:\*\*)?, p99 ([\d.]+) ms")


def commit(checkout: Path) -> str:
    out = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True, check=True, timeout=30)
    return out.stdout.strip()


def recreate_database(url: str) -> None:
    """Drop and create the database of ``url`` (each side migrates an empty one)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from sqlalchemy import create_engine, text

    from orbit_server.store.db import normalize_url

    target = normalize_url(url)
    name = target.database
    engine = create_engine(target.set(database="information_schema"))
    try:
        with engine.begin() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS `{name}`"))
            conn.execute(text(f"CREATE DATABASE `{name}`"))
    finally:
        engine.dispose()


def run_once(checkout: Path, tasks: int, samples: int, db: str | None) -> dict[str, float]:
    cmd = [str(checkout / ".venv" / "bin" / "python"), str(checkout / "scripts" /
                                                          "bench_server.py"),
           "--no-write", "--tasks", str(tasks), "--latency-samples", str(samples)]
    if db:
        recreate_database(db)
        cmd += ["--db", db]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, cwd=checkout)
    if done.returncode != 0:
        raise SystemExit(f"{checkout}: bench_server failed:\n{done.stdout}\n{done.stderr}")
    a, b, c = ROW_A.search(done.stdout), ROW_B.search(done.stdout), ROW_C.search(done.stdout)
    submits = SUBMITS.search(done.stdout)
    if not (a and b and c and submits):
        raise SystemExit(f"{checkout}: could not read the figures from:\n{done.stdout}")
    return {"a": float(a[1]), "submits": float(submits[1]), "b50": float(b[1]), "b99": float(b[2]),
            "c50": float(c[1]), "c99": float(c[2])}


def cell(runs: list[dict[str, float]], keys: tuple[str, ...]) -> str:
    per_run = ", ".join("/".join(f"{r[k]:g}" for k in keys) for r in runs)
    med = "/".join(f"{statistics.median(r[k] for r in runs):g}" for k in keys)
    return f"{per_run} (median {med})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="the earlier checkout")
    parser.add_argument("--after", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=20000)
    parser.add_argument("--latency-samples", type=int, default=300)
    parser.add_argument("--db", help="a MySQL/MariaDB URL both sides use in turn")
    args = parser.parse_args()
    sides = {"before": args.before.resolve(), "after": args.after.resolve()}
    runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    loads = [os.getloadavg()[0]]
    for i in range(args.rounds):
        order = ("before", "after") if i % 2 == 0 else ("after", "before")
        for side in order:
            runs[side].append(run_once(sides[side], args.tasks, args.latency_samples, args.db))
            print(f"round {i + 1} {side}: {runs[side][-1]}", file=sys.stderr, flush=True)
    loads.append(os.getloadavg()[0])
    store = "MariaDB" if args.db else "SQLite"
    print(f"bench_server.py, {store}, {args.rounds} rounds interleaved; before "
          f"{commit(sides['before'])}, after {commit(sides['after'])}; load average (1 min) "
          f"{loads[0]:.2f} at the start, {loads[1]:.2f} at the end\n")
    print("| figure | before | after |\n| --- | --- | --- |")
    for label, keys in (("(a) completions/s", ("a",)),
                        ("(a) its batch submits alone, tasks/s", ("submits",)),
                        ("(b) submit → reserve p50/p99 ms", ("b50", "b99")),
                        ("(c) submit-and-wait p50/p99 ms", ("c50", "c99"))):
        print(f"| {label} | {cell(runs['before'], keys)} | {cell(runs['after'], keys)} |")


if __name__ == "__main__":
    main()
