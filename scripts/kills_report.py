"""The report of bench_kills.py: its section of docs/benchmarks.md, each load level's
figures beside the targets (kills within the lease at load <= TARGET_LOAD), with the run's
settings these figures depend on."""

from __future__ import annotations

import os
import platform
from collections.abc import Callable
from typing import Any

BEGIN = "<!-- kill-bench:begin -->"
END = "<!-- kill-bench:end -->"
ATTEMPT_TIMEOUT_MS = 300
LEASE_TTL_MS = 10_000  # far beyond the attempt timeout: the timeout is what ends the lease
FACTS = ("kill_reason", "signal", "child_pid", "cpu_ms", "peak_rss_bytes", "killed_at_ms")
TARGET_LOAD = 3.0
TARGET_GONE_SHARE = 0.999


def fmt_dist(d: dict[str, float] | None) -> str:
    if d is None:
        return "n/a"
    # The minimum too: a kill far earlier than the lease end is a finding as well.
    return f"{d['p50']:+.1f} / {d['p99']:+.1f} / {d['max']:+.1f} ms (min {d['min']:+.1f})"


def fmt_counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1])) or "-"


def load_of(fig: dict[str, Any]) -> float:
    """The load a target is judged at: the level's mean extra load (LoadSampler), or the
    1-minute average at its end if nothing was sampled."""
    return float(fig["extra_load"] if fig["extra_load"] is not None else fig["load_end"])


def judged(ok: bool, fig: dict[str, Any]) -> str:
    """A verdict; at load above the target's range it is shown but not held against."""
    verdict = "meets" if ok else "MISSES"
    if load_of(fig) > TARGET_LOAD:
        return f"{verdict} (load {load_of(fig):.1f} > {TARGET_LOAD:.0f}: outside the target)"
    return verdict


def share(part: int, whole: int) -> str:
    return f"{part}/{whole} ({part / whole:.1%})" if whole else "n/a"


def figure_rows(figs: list[dict[str, Any]]) -> list[tuple[str, list[str], str]]:
    """(figure, one cell per level, target) rows of the report table."""
    def cells(fn: Callable[[dict[str, Any]], str]) -> list[str]:
        return [fn(f) for f in figs]

    def gone_cell(f: dict[str, Any], role: str) -> str:
        g = f[role]
        seen = g["gone_ms"]["n"] if g["gone_ms"] else 0
        text = share(g["gone_before"], seen)
        if role == "child":
            ok = seen > 0 and g["gone_before"] >= TARGET_GONE_SHARE * seen
            text += f": {judged(ok, f)}"
        return text

    return [
        ("**extra load**: runnable tasks besides Orbit's and the watcher's (mean while the "
         "kills ran; busy loops count) / all runnable tasks / 1-min load average at the end",
         cells(lambda f: f"**{load_of(f):.1f}** / {f['runnable'] or 0:.1f} / "
                         f"{f['load_end']:.2f}"),
         f"targets apply at extra load ≤ {TARGET_LOAD:.0f}"),
        ("kill tasks / attempts killed (outcome UNKNOWN)",
         cells(lambda f: f"{f['tasks']} / {f['kills']}" + (
             f" ({f['pid_mismatch']} with a child_pid not the stamping pid)"
             if f["pid_mismatch"] else "")), ""),
        ("**last handler stamp - lease end**, child: p50 / p99 / max",
         cells(lambda f: fmt_dist(f["child"]["stamp_ms"])), "< 0"),
        ("last handler stamp - lease end, grandchild: p50 / p99 / max",
         cells(lambda f: fmt_dist(f["grandchild"]["stamp_ms"])), "< 0"),
        ("kills with a handler stamp (child or grandchild) at or after the lease end",
         cells(lambda f: f"{f['handler_after']}/{f['kills']}: "
                         f"{judged(f['handler_after'] == 0, f)}"), "0"),
        ("kills whose child / grandchild never reached its spin (killed first, or never ran)",
         cells(lambda f: f"{f['child']['never_spun']} / {f['grandchild']['never_spun']}"), ""),
        ("**child gone - lease end**: p50 / p99 / max",
         cells(lambda f: fmt_dist(f["child"]["gone_ms"])), ""),
        ("grandchild gone - lease end: p50 / p99 / max",
         cells(lambda f: fmt_dist(f["grandchild"]["gone_ms"])), ""),
        ("**child gone before the server's lease end**",
         cells(lambda f: gone_cell(f, "child")), f"≥ {TARGET_GONE_SHARE:.1%}"),
        ("grandchild gone before the server's lease end",
         cells(lambda f: gone_cell(f, "grandchild")), ""),
        ("process gone - its last stamp (monotonic), child: p50 / p99 / max",
         cells(lambda f: fmt_dist(f["child"]["exit_after_stamp_ms"])), ""),
        ("**kill instant recorded by the server - lease end** (kill_after_lease_end_ms): "
         "p50 / p99 / max; kills at or after the lease end",
         cells(lambda f: f"{fmt_dist(f['kill_vs_lease_ms'])}; {f['kills_after_lease_end']}"),
         "< 0"),
        ("SIGKILL → reap in the supervisor (reap_ms): p50 / p99 / max",
         cells(lambda f: fmt_dist(f["reap_ms"])), ""),
        ("late kills (a lease timer > 20 ms after the local expiry) / largest event-loop "
         "lag / margin at the drain",
         cells(lambda f: f"{f['late_kills']} / "
                         + (f"{f['loop_lag_max_ms']:.0f} ms / {f['margin_ms']:.0f} ms"
                            if f["loop_lag_max_ms"] is not None else "n/a")), "0"),
        ("attempts that never ran (start answered after the local expiry)",
         cells(lambda f: str(f["never_ran"])), ""),
        ("**kill records lacking their facts** (any of " + ", ".join(FACTS) + " null)",
         cells(lambda f: f"{share(f['lacking'], f['kills'])}: {judged(f['lacking'] == 0, f)}"),
         "0"),
        ("outcome/code recorded on the attempts",
         cells(lambda f: fmt_counts(f["labels"])), ""),
        ("… of those lacking their facts",
         cells(lambda f: fmt_counts(f["lacking_labels"])), ""),
        ("kill_reason recorded", cells(lambda f: fmt_counts(f["kill_reasons"])), ""),
        ("evidence rows (outcome/code (reason))",
         cells(lambda f: fmt_counts(f["evidence_labels"])), ""),
        ("evidence received - lease end: p50 / p99 / max",
         cells(lambda f: fmt_dist(f["evidence_ms"])), ""),
        ("attempt closed (finished_at) - lease end: p50 / p99 / max",
         cells(lambda f: fmt_dist(f["closed_ms"])), ""),
        ("watcher: child / grandchild pids by what it saw",
         cells(lambda f: f"{fmt_counts(f['child']['status'])} / "
                         f"{fmt_counts(f['grandchild']['status'])}"), "all gone"),
        ("watcher wake-up lag on its timeouts: p50 / p99 / max",
         cells(lambda f: "{p50:.0f} / {p99:.0f} / {max:.0f} µs".format(**f["watcher"]["lag_us"])),
         ""),
        ("orbit-supervise exit code after its drain (SIGTERM)",
         cells(lambda f: str(f["supervise_exit"])), "0"),
        ("CLOCK_REALTIME - CLOCK_MONOTONIC moved by",
         cells(lambda f: f"{f['clock_offset_spread_us']:.0f} µs"), "≈ 0 (no clock step)"),
    ]


def render(result: dict[str, Any]) -> str:
    figs = result["levels"]
    head = "| figure | " + " | ".join(f"busy {f['busy']}" for f in figs) + " | target |"
    rule = "| --- |" + " --- |" * (len(figs) + 1)
    rows = [f"| {name} | " + " | ".join(cells) + f" | {target} |"
            for name, cells, target in figure_rows(figs)]
    machine = (f"{os.cpu_count()} CPUs (nproc), Python {platform.python_version()}, "
               f"{platform.system()} {platform.machine()}, {result['when']}, load average "
               f"{result['load_before']:.2f} before the run and {result['load_after']:.2f} "
               f"after (other work shares the CPUs); a plain Python loop of a million "
               f"additions took {result['loop_ms']:.0f} ms (best of 5) just before")
    quick = " (a `--quick` smoke run)" if result["quick"] else ""
    return "\n".join([
        BEGIN,
        f"## Kills measured from outside (`scripts/bench_kills.py`){quick}",
        "",
        f"Machine: {machine}. Watcher: {figs[0]['watcher']['sched'] if figs else '-'}.",
        "",
        f"One `orbit-server` (temporary SQLite file) and, per level, a fresh queue and one "
        f"`orbit-supervise --workers {result['workers']} --child-nice {result['child_nice']}`; "
        f"{result['kills']} tasks per level, "
        f"each NON_IDEMPOTENT with max_attempts 1, `attempt_timeout_ms` {ATTEMPT_TIMEOUT_MS} "
        f"and a {LEASE_TTL_MS // 1000} s lease TTL, so every task is one attempt-timeout kill. "
        "The handler (`scripts/kill_spinner.py`) ignores SIGTERM, starts a grandchild in its "
        "own session (setsid), and both spin in one C call (a library the script compiles) "
        "that stamps CLOCK_MONOTONIC and CLOCK_REALTIME into their slot of a shared page in "
        "/dev/shm on every turn (about 0.1 µs). A separate watcher process opens a pidfd for "
        "every pid the page reports (checked against /proc start times, so a reused pid is "
        "not mistaken) and records when each turns readable: the process has exited. "
        "`busy N`: N extra Python busy loops on the CPUs during the level.",
        "",
        "Load: the spinners themselves keep about two runnable tasks per worker, so the "
        "targets' \"load ≤ 3\" is judged on the *extra* load: the mean number of runnable "
        "tasks (/proc/loadavg, sampled every 0.1 s while the kills run) that are not in the "
        "server's, the supervisor's or the watcher's process trees; the busy loops and "
        "whatever else the host runs count in it. A verdict at a higher load is shown but "
        "marked outside the target.",
        "",
        "Clocks: the server records `lease_expires_at_ms` on CLOCK_REALTIME (`time.time_ns()`, "
        "ms) and holds a lease while its now is below it, so the lease ends at that instant; "
        "the stamps and the watcher's instants read CLOCK_REALTIME on the same host, so they "
        "are compared directly. Each also reads CLOCK_MONOTONIC alongside: the spread of "
        "their difference shows the wall clock was not stepped during a level, and "
        "process-gone - last-stamp is taken on the monotonic clock alone. A last stamp is "
        "the handler's last instruction to within one loop turn. A gone instant is when the "
        "watcher woke on the pidfd; its wake-up lag on its own 5 ms timer wakes is shown as "
        "a measure of that error. Lease ends are whole milliseconds, as the server keeps "
        "them.",
        "",
        head,
        rule,
        *rows,
        "",
        f"Rerun: `.venv/bin/python scripts/bench_kills.py --kills {result['kills']} "
        f"--busy {','.join(str(f['busy']) for f in figs)} --child-nice {result['child_nice']}`.",
        END,
    ])
