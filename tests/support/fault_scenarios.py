"""The fault regression scenarios: one implementation for the tests and the published report.

Each scenario starts a real ``orbit-server`` (a SQLite file, or the MariaDB database it is
given), real ``orbit-supervise`` processes and their children, injects its fault ``runs``
times (each run on a fresh queue), and returns a ``Row``: the tasks, the faults injected,
the violations of each promise of tests/support/invariants.py, the scenario's own checks
(the lost op resent with its msg_id and applied once, the exit code, nothing left alive...)
and the latencies it measured from outside.

    row = run_scenario("kill_supervisor", Ctx(workdir, db_url=None, store="sqlite", runs=1))
    assert row.ok, row.explain()

The scenarios live by kind: the run's machinery in fault_stage.py, connection faults in
fault_connection.py, kills in fault_kills.py, grants in fault_grants.py,
fault_grant_kills.py and fault_grant_races.py.
tests/e2e/test_fault_scenarios.py runs every scenario once (the SIGKILL ones on MariaDB too);
scripts/fault_report.py runs them ``--runs`` times on each store and writes
docs/reports/fault-regression.md. Every process is stopped by its PID; every wait is bounded.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from . import (
    fault_connection,
    fault_grant_kills,
    fault_grant_races,
    fault_grants,
    fault_kills,
)
from .fault_stage import SUPERVISOR_ARGS_ENV, Ctx, Row, Scenario, Server, Stage, wait_gone
from .orbit_http import OrbitEnv, http_client
from .proxy import TcpProxy
from .server import ServerProcess
from .supervisor_helpers import alive

SCENARIOS = {s.name: s for s in [*fault_connection.scenarios(), *fault_kills.scenarios(),
                                  *fault_grants.scenarios(), *fault_grant_kills.scenarios(),
                                  *fault_grant_races.scenarios()]}
# Scenarios whose product behaviour has not landed: their rows say so (name -> title, why).
PENDING: dict[str, tuple[str, str]] = {}


@contextmanager
def scenario_server(ctx: Ctx, session_ttl_ms: int = 3000) -> Iterator[Server]:
    """A server for scenarios (several may share one: each run has its own queue)."""
    process = ServerProcess(ctx.workdir / "server", db_url=ctx.db_url,
                            session_ttl_ms=session_ttl_ms, kill_grace_ms=200)
    process.start()
    try:
        admin = process.bootstrap_admin()
        env = OrbitEnv(process, admin, http_client(process.url, admin.bearer))
        try:
            yield Server(process, env)
        finally:
            env.close()
            env.admin_http.close()
    finally:
        process.stop()


@contextmanager
def _network(scenario: Scenario, server: Server) -> Iterator[None]:
    """The run's proxy (and frame tap) in front of the server, when the scenario uses one."""
    if scenario.tap is None and not scenario.proxy:
        yield
        return
    server.tap = None if scenario.tap is None else scenario.tap()
    server.proxy = TcpProxy(server.process.port, tap=server.tap).start()
    try:
        yield
    finally:
        server.proxy.stop()
        server.proxy = server.tap = None


def run_scenario(name: str, ctx: Ctx, server: Server | None = None) -> Row:
    """Run one scenario ``ctx.runs`` times (on ``server``, else on one of its own: also when
    the scenario needs a session TTL of its own); its row."""
    scenario = SCENARIOS[name]
    ttl = scenario.session_ttl_ms
    if server is None or (ttl is not None and server.process.session_ttl_ms != ttl):
        with scenario_server(ctx, ttl or 3000) as own:
            return run_scenario(name, ctx, own)
    row = Row(name, scenario.title, ctx.store)
    t0 = time.monotonic()
    left_behind: list[int] = []
    for run in range(ctx.runs):
        stage = Stage(server.env, ctx.workdir / f"{name}-run{run}", row)
        try:
            with _network(scenario, server):
                scenario.body(stage, server)
            row.runs += 1
        finally:
            left_behind += stage.close()
    row.expect("nothing a supervisor started outlived it",
               [] if wait_gone(left_behind) else [f"left alive: {alive(left_behind)}"])
    row.seconds = time.monotonic() - t0
    return row


def unavailable_row(name: str, title: str, store: str, reason: str) -> Row:
    """A scenario that cannot run yet: reported as such, never as a pass."""
    return Row(name, title, store, unavailable=reason)


__all__ = ["PENDING", "SCENARIOS", "SUPERVISOR_ARGS_ENV", "Ctx", "Row", "Server",
           "run_scenario", "scenario_server", "unavailable_row"]
