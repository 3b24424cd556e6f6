"""bench_peers.py's report: the tables of its docs/benchmarks.md section (each system's
figure, Orbit over the best peer per round, CPU per task by process, what one Orbit task
costs), the host, and how each row is measured."""

from __future__ import annotations

import math
import platform
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from peers_setup import (
    BASE_CONCURRENCY,
    BATCH,
    BEGIN,
    END,
    LABELS,
    MINUS,
    PARTS,
    PEERS,
    PREFETCH,
    PRODUCERS,
    TIMES,
    Counts,
    ceiling,
    median_or_never,
)


@dataclass(frozen=True)
class Row:
    """One line of the table: its figure keys (two for "p50 / p99" and "RSS / PSS"), which
    way is better, and what the peers' side is when it differs (the batch row compares
    with the peers' one-per-call figure)."""

    title: str
    keys: tuple[str, ...]
    better: str  # "high", "low" or "kill" (a signed delay; "never" possible)
    unit: str = ""
    peer_keys: tuple[str, ...] = ()
    orbit_only: bool = False
    cpu: tuple[float, int] | None = None  # (task ms, concurrency): show % of the ceiling
    decimals: int = 0


def rows(counts: Counts) -> list[Row]:
    return [
        Row(f"{counts.noop:,} no-op tasks submitted one per call, then every result awaited "
            "(tasks/s)", ("noop_one",), "high"),
        Row(f"the same, Orbit submitting in batches of {BATCH:,} (tasks/s; ratio to the best "
            "peer's one per call)", ("noop_batch",), "high", peer_keys=("noop_one",),
            orbit_only=True),
        Row(f"sequential submit-and-wait of a no-op, p50 / p99 (ms, n={counts.sequential})",
            ("seq_p50", "seq_p99"), "low", decimals=2),
        Row(f"{counts.cpu10} tasks {TIMES} 10 ms CPU, concurrency 2 (tasks/s, % of the ceiling)",
            ("cpu10_c2",), "high", cpu=(10.0, 2)),
        Row("the same, concurrency 4", ("cpu10_c4",), "high", cpu=(10.0, 4)),
        Row(f"{counts.cpu100} tasks {TIMES} 100 ms CPU, concurrency 2 (tasks/s, % of the ceiling)",
            ("cpu100_c2",), "high", cpu=(100.0, 2), decimals=1),
        Row(f"{PRODUCERS} concurrent producers, {counts.producer_tasks // PRODUCERS} no-ops "
            "each submitted one per call, then their results awaited (tasks/s)",
            ("producers",), "high"),
        Row(f"the 10 ms CPU row, Orbit with `--prefetch {PREFETCH}` (ratio to the best peer's "
            "10 ms row)", ("cpu10_c2_prefetch",), "high", peer_keys=("cpu10_c2",),
            orbit_only=True, cpu=(10.0, 2)),
        Row(f"the 100 ms CPU row, Orbit with `--prefetch {PREFETCH}` (ratio to the best "
            "peer's 100 ms row)", ("cpu100_c2_prefetch",), "high", peer_keys=("cpu100_c2",),
            orbit_only=True, cpu=(100.0, 2), decimals=1),
        Row("1 s time limit, spinner ignoring SIGTERM: limit → process gone (ms; ratio "
            f"column: Orbit {MINUS} fastest peer)", ("kill_ms",), "kill"),
        Row(f"chord: {counts.chord_members:,} members {TIMES} 10 ms CPU and one callback, "
            "concurrency 2, submit to the callback's result (members/s, % of the ceiling)",
            ("chord",), "high", cpu=(10.0, 2)),
        Row(f"the chord row, Orbit with `--prefetch {PREFETCH}` (members/s; ratio to the best "
            "peer's chord row)", ("chord_prefetch",), "high", peer_keys=("chord",),
            orbit_only=True, cpu=(10.0, 2)),
        Row("worker process tree RSS / PSS, concurrency 2 (MiB)", ("rss", "pss"), "low",
            decimals=1),
    ]


def fmt(value: float | None, decimals: int, signed: bool = False) -> str:
    if value is None:
        return "never"
    text = f"{value:+.{decimals}f}" if signed else f"{value:,.{decimals}f}"
    return text.replace("-", MINUS)


def spread(values: Sequence[float | None], decimals: int, signed: bool = False) -> str:
    """The median and, when the rounds differ, their range."""
    mid = fmt(median_or_never(values), decimals, signed)
    ordered = sorted(values, key=lambda v: math.inf if v is None else v)
    low, high = fmt(ordered[0], decimals, signed), fmt(ordered[-1], decimals, signed)
    return mid if low == high else f"{mid} ({low} to {high})"


def system_cell(row: Row, runs: list[dict[str, Any]], system: str) -> str:
    if row.orbit_only and system != "orbit":
        return "—"
    parts = []
    for key in row.keys:
        values = [run[system][key] for run in runs]
        text = spread(values, row.decimals, signed=row.better == "kill")
        if row.cpu is not None:
            share = statistics.median(values) / ceiling(*row.cpu)
            text += f", {share:.0%}"
        if row.better == "kill" and median_or_never(values) is None:
            hit = median_or_never([run[system]["kill_interrupted_ms"] for run in runs])
            if hit is not None:
                text += (f" (an exception stopped the task in its thread at {fmt(hit, 0, True)}"
                         " ms; the process lives on)")
        parts.append(text)
    return " / ".join(parts)


def round_ratio(row: Row, run: dict[str, Any], key: str, peer_key: str,
                peers: Sequence[str]) -> float | str | None:
    """Orbit against the best peer in one round: a ratio, or for the kill row the
    difference in ms (or a word when a side never ended its process)."""
    orbit = run["orbit"][key]
    theirs = [run[p][peer_key] for p in peers]
    if row.better == "kill":
        ended = [t for t in theirs if t is not None]
        if orbit is None:
            return "Orbit never"
        return orbit - min(ended) if ended else "peers never"
    best = max(theirs) if row.better == "high" else min(theirs)
    return orbit / best if best else None


def kill_summary(numbers: list[float], words: list[str], total: int) -> str:
    """The kill row's comparison: the median difference when every round had one, else
    who never ended the process (or "mixed" when the rounds disagree)."""
    if len(numbers) == total:
        return fmt(statistics.median(numbers), 0, True) + " ms"
    if not numbers:
        return ", ".join(sorted(set(words)))
    return "mixed"


def ratio_cell(row: Row, runs: list[dict[str, Any]], peers: Sequence[str]) -> str:
    if not peers:
        return "—"
    parts = []
    peer_keys = row.peer_keys or row.keys
    for key, peer_key in zip(row.keys, peer_keys, strict=True):
        per_round = [round_ratio(row, run, key, peer_key, peers) for run in runs]
        numbers = [r for r in per_round if isinstance(r, float)]
        words = [r for r in per_round if isinstance(r, str)]
        if row.better == "kill":
            text = kill_summary(numbers, words, len(per_round))
            listing = ", ".join(fmt(r, 0, True) if isinstance(r, float) else str(r)
                                for r in per_round)
        else:
            text = f"{statistics.median(numbers):.2f}{TIMES}" if numbers else "—"
            listing = ", ".join(f"{r:.2f}" for r in numbers)
        parts.append(f"**{text}**" + (f" ({listing})" if len(per_round) > 1 else ""))
    return " / ".join(parts)


def table(result: dict[str, Any]) -> str:
    systems = result["systems"]
    peers = [s for s in systems if s in PEERS]
    runs = [r["figures"] for r in result["rounds"]]
    head = ["workload", *(LABELS[s] for s in systems)]
    if "orbit" in systems and peers:
        head.append("Orbit / best peer: median (per round)")
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for row in rows(Counts(**result["counts"])):
        if row.orbit_only and "orbit" not in systems:
            continue
        cells = [row.title, *(system_cell(row, runs, s) for s in systems)]
        if len(head) > len(systems) + 1:
            cells.append(ratio_cell(row, runs, peers))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# The rows whose CPU per task is shown, with a short name each.
CPU_ROWS = (("noop_one", "no-ops, one per call"), ("noop_batch", "no-ops, Orbit batch submit"),
            ("seq", "sequential submit-and-wait"), ("cpu10_c2", "10 ms CPU, concurrency 2"),
            ("cpu10_c4", "10 ms CPU, concurrency 4"), ("cpu100_c2", "100 ms CPU, concurrency 2"),
            ("cpu10_c2_prefetch", f"10 ms CPU, c2, Orbit `--prefetch {PREFETCH}`"),
            ("cpu100_c2_prefetch", f"100 ms CPU, c2, Orbit `--prefetch {PREFETCH}`"),
            ("producers", f"{PRODUCERS} producers, one per call"),
            ("chord", "chord: 10 ms CPU members and a callback"),
            ("chord_prefetch", f"chord, Orbit `--prefetch {PREFETCH}`"))
BROKER = {"orbit": "orbit-server", "celery": "redis-server", "dramatiq": "redis-server"}


def cpu_table(result: dict[str, Any]) -> str:
    """CPU per task by process, medians over the rounds: where each system's time goes."""
    systems = result["systems"]
    runs = [r["figures"] for r in result["rounds"]]
    lines = ["| workload | system | producer | broker | worker main process | worker pool "
             "processes | all |", "|" + " --- |" * 7]
    for key, name in CPU_ROWS:
        for system in systems:
            per_round = [run[system].get("cpu_ms", {}).get(key) for run in runs]
            known = [r for r in per_round if r is not None]
            if not known:
                continue
            cells = [statistics.median(r[part] for r in known) for part in PARTS]
            lines.append(f"| {name} | {LABELS[system]} ({BROKER[system]}) | "
                         + " | ".join(f"{c:.2f}" for c in cells)
                         + f" | **{sum(cells):.2f}** |")
    return "\n".join(lines)


COST_COLUMNS = (("transactions", "store transactions"), ("commits", "commits"),
                ("syncs", "WAL fsyncs"), ("http_requests", "HTTP requests"),
                ("producer_frames", "producer channel messages"),
                ("worker_frames", "worker frames"), ("child_messages", "child messages"))


def cost_table(result: dict[str, Any]) -> str:
    """What one Orbit task costs, per row (medians over the rounds)."""
    runs = [r["figures"]["orbit"] for r in result["rounds"] if "orbit" in r["figures"]]
    lines = ["| workload | " + " | ".join(name for _k, name in COST_COLUMNS) + " |",
             "|" + " --- |" * (len(COST_COLUMNS) + 1)]
    for key, name in CPU_ROWS:
        known = [run["per_task"][key] for run in runs if key in run.get("per_task", {})]
        if known:
            cells = [statistics.median(k[c] for k in known) for c, _n in COST_COLUMNS]
            lines.append(f"| {name} | " + " | ".join(f"{c:.2f}" for c in cells) + " |")
    return "\n".join(lines)


def has_costs(result: dict[str, Any]) -> bool:
    return any("per_task" in r["figures"].get("orbit", {}) for r in result["rounds"])


def host_text(result: dict[str, Any]) -> str:
    h, rounds = result["host"], result["rounds"]
    per_round = "; ".join(
        f"round {i + 1} ({' → '.join(LABELS[s] for s in r['order'])}): load "
        f"{r['host']['load']:.2f}, loop {r['host']['loop_ms']:.0f} ms, fsync "
        f"{r['host']['fsync_us']:.0f} µs" for i, r in enumerate(rounds))
    v = result["versions"]
    peer_versions = ", ".join(f"{name} {v[name]}" for name in
                              ("celery", "kombu", "billiard", "dramatiq", "redis") if name in v)
    return "\n".join([
        f"Host: {h['cpu_model']}, {h['cores']} cores usable (nproc {h['nproc']}), "
        f"{platform.system()} {platform.release()}; {h['started']} to {h['ended']}; load "
        f"average {h['load_before']} before and {h['load_after']} after (1, 5, 15 min; "
        "other work shares the CPUs). Before each round a plain Python loop of a million "
        "additions (best of 5) and a 4 KiB write + fsync (p50) were timed, as in the "
        f"server and supervisor sections: {per_round}.",
        "",
        f"Versions: Orbit {v.get('orbit', '?')} (commit {v.get('orbit_commit', '?')}), "
        f"Python {v['python']}, redis-server {v.get('redis_server', 'not used')}; "
        f"{peer_versions or 'no peers'}.",
    ])


METHOD = """\
How each row is measured. The producer is this script, one Python process using each
system's own client: `OrbitClient.submit` / `submit_batch` and `get_task(wait_ms=...)`
per result (with its defaults: over the producer channel, a WebSocket whose `ended`
pushes answer the waits; a long poll per result over HTTP); Celery `task.delay()` and
`AsyncResult.get()`; Dramatiq `actor.send()` and `message.get_result(block=True)`.
Throughput rows count from the first submit to the last result received, every result
awaited in submission order;
the CPU rows submit one per call too (the work is the same function in every system,
`scripts/peers/peers_work.py`, burning the stated CPU time of its thread). The ceiling is
min(cores, concurrency) / task time. The many-producers row spawns its processes, lets each
open its connections with one task, then releases them together. The time-limit row:
the spinner writes its PID and start instant (CLOCK_MONOTONIC, one clock for all
processes) to a file; the script opens a pidfd on that PID and polls it until the kernel
reports the process exited, measured from the handler's start + 1 s (Orbit counts its
`attempt_timeout_ms` from the start its grant records, which precedes the handler's
first line, so it can end before that instant); "never" means still running 5 s after.
Memory: psutil's RSS and PSS summed over the worker command's process and all its
descendants (Orbit: supervisor, template and children; Celery: main and pool processes;
Dramatiq: main and worker processes), after the warm-up and the first no-op row.

What differs besides speed, and may bias the figures:
- **Durability.** redis-server runs without persistence (`--save "" --appendonly no`):
  queued tasks and results live only in its memory, and a crash loses them. `orbit-server`
  runs on SQLite with its defaults (WAL, `--durability full`): every submit (with the
  grant it makes) and finish is on disk, its fsync done by the WAL sync thread, before it
  is answered, and tasks, attempts and audit rows are kept. That is Orbit's guarantee and
  it is paid in every row here.
- **Start confirmation.** Orbit runs a handler only under a lease the server granted and
  committed: with grants (`orbit-supervise`'s default) the reservation arrives started,
  its grant made in the submit's or the dispatch's transaction, with no round trip of its
  own; Celery (`acks_late`, prefetch multiplier 1) acknowledges after the run; Dramatiq
  prefetches two messages per worker thread (its default). Both hold the next message
  while a handler runs; Orbit does so only when asked, as in its `--prefetch 2` rows (one
  started attempt waiting per child).
- **Time limits.** Celery's hard limit sends SIGTERM, waits 0.1 s, then SIGKILLs the pool
  process; Dramatiq's raises an exception in the worker thread (checked once a second) and
  never ends the process; Orbit SIGKILLs the child's process group.
- **Clients.** Each system is driven through its own Python client, whose CPU counts (on
  the same cores): Orbit's speaks its producer channel (a WebSocket; HTTP/1.1 for
  batches), the peers' speak Redis's protocol; the CPU table shows each producer's
  share.
- **Chords.** Orbit's chord is one workflow submitted in one transaction: the callback is a
  durable WAITING task the server releases in the transaction that ends the last member,
  and it receives the members' results in order. Celery's chord counts its members in
  Redis and passes the callback their results; Dramatiq's group completion callback counts
  them through its rate limiter in Redis and receives none (the benchmark's callback reads
  nothing back). Neither peer's count survives a Redis without persistence.
- **State.** One `orbit-server` and its database serve the whole run (a fresh queue per
  session, the earlier rounds' tasks kept), while Redis is emptied between sessions.
- **One machine.** The producer, `orbit-server`, redis-server and the workers share the
  same cores; Redis's CPU serves the peers as the server's serves Orbit, and each stays
  up, idle, during the other systems' sessions."""


def render(result: dict[str, Any]) -> str:
    c = result["counts"]
    rounds = len(result["rounds"])
    has_cpu = any("cpu_ms" in figures for r in result["rounds"]
                  for figures in r["figures"].values())  # runs before it was counted lack it
    return "\n".join([
        BEGIN,
        "## Orbit beside Celery and Dramatiq (`scripts/bench_peers.py`)",
        "",
        *(["**Smoke run (`--quick`): counts shrunk, these are not measurements.**", ""]
          if result["quick"] else []),
        f"Orbit (`orbit-supervise`, `orbit-server` on a temporary SQLite file), Celery (Redis "
        f"broker and result backend, prefork, `acks_late`, `worker_prefetch_multiplier=1`) "
        f"and Dramatiq (Redis broker, Results middleware, one thread per process), at the "
        f"same concurrency (2 unless a row says otherwise), same tasks, interleaved in one "
        f"run: {rounds} round{'s' if rounds != 1 else ''}, the systems' order rotating each "
        f"round. Each system's figure is the median of its rounds (the range in brackets); "
        f"the last column is Orbit over the best peer, taken within each round, and its "
        f"median: above 1 Orbit is faster on throughput rows, below 1 it is better on "
        f"latency and memory. {c['kills']} time-limit sample(s) per system and round.",
        "",
        host_text(result),
        "",
        table(result),
        "",
        *(["Where the time goes: CPU per task (ms, user + system) by process, medians of "
           "the rounds, in the same run. The producer is this script (with the producer "
           "processes of the many-producers row); the broker is `orbit-server` for Orbit and "
           "`redis-server` for the peers; the worker's main process is `orbit-supervise`, "
           "Celery's main process or Dramatiq's; its pool processes are Orbit's template "
           "and children, Celery's prefork pool and Dramatiq's worker processes. With 2 "
           "cores, a throughput row's tasks/s is at most 2,000 / the all column.",
           "", cpu_table(result), ""] if has_cpu else []),
        *(["What one Orbit task costs, per row (medians of the rounds), from the "
           "counters of `orbit-server` and `orbit-supervise` before and after the row "
           "(docs/observability.md): store transactions (reads included), commits that "
           "wrote something, fsyncs of the WAL, HTTP requests (scrapes left out), producer "
           "channel messages and worker protocol frames (both directions), and messages "
           "over the children's sockets. Heartbeats and the metrics' own scrapes fall "
           "into the rows they happen in.", "", cost_table(result), ""]
          if has_costs(result) else []),
        METHOD,
        "",
        "Rerun: `.venv/bin/pip install -e '.[test,bench]'` (Celery and Dramatiq), a "
        "`redis-server` binary (`apt install redis-server` / `brew install redis`), then "
        "`.venv/bin/python scripts/bench_peers.py` (several minutes; `--quick` for a smoke "
        "run, `--only orbit,celery` to pick systems, `--no-write` to leave this file).",
        END,
    ])


def chord_table(result: dict[str, Any]) -> str:
    """The chord rows alone (``--chord-only``): members/s per round, CPU per member by part,
    and Orbit's over the best peer's, round by round."""
    runs = [r["figures"] for r in result["rounds"]]
    systems = [s for s in result["systems"] if s in runs[0]]
    peers = [s for s in systems if s in PEERS]
    members = result["counts"]["chord_members"]
    lines = [f"chord: {members:,} members {TIMES} 10 ms CPU and one callback, concurrency "
             f"{BASE_CONCURRENCY}, {len(runs)} round(s)", "",
             "| system | members/s (rounds) | CPU per member, ms: " + " / ".join(PARTS)
             + " / all | over the best peer (rounds) |", "| --- | --- | --- | --- |"]
    shown = [(s, "chord", LABELS[s]) for s in systems]
    if "orbit" in systems:
        shown.append(("orbit", "chord_prefetch", f"Orbit `--prefetch {PREFETCH}`"))
    for system, key, label in shown:
        rates = [run[system][key] for run in runs]
        cpu = [run[system]["cpu_ms"][key] for run in runs]
        parts = [statistics.median(c[part] for c in cpu) for part in PARTS]
        ratios = ([rate / max(run[p]["chord"] for p in peers)
                   for rate, run in zip(rates, runs, strict=True)]
                  if system == "orbit" and peers else [])
        lines.append(
            f"| {label} | {statistics.median(rates):.1f} ("
            + ", ".join(f"{r:.1f}" for r in rates) + ") | "
            + " / ".join(f"{x:.2f}" for x in parts) + f" / **{sum(parts):.2f}** | "
            + (f"**{statistics.median(ratios):.2f}{TIMES}** ("
               + ", ".join(f"{r:.2f}" for r in ratios) + ")" if ratios else "—") + " |")
    return "\n".join(lines)
