"""Forwarded headers (``X-Forwarded-For``) name the client only when they come from a proxy
the operator named (``--forwarded-allow-ips``; none by default): otherwise any local client
could pick its own address and spend a fresh failed-login budget with each request.
Real servers on SQLite (the HTTP layer is the same on both stores)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from support.server import ServerProcess
from support.waiting import UNIT

from orbit_wire.ids import new_id

BURST = 3
# A budget that does not refill while the test runs: every failure counts.
LIMIT_ARGS = ("--auth-failures-burst", str(BURST), "--auth-failures-per-s", "0.001")


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[..., ServerProcess]]:
    servers: list[ServerProcess] = []

    def make(*args: str) -> ServerProcess:
        srv = ServerProcess(tmp_path / f"server{len(servers)}", extra_args=(*LIMIT_ARGS, *args))
        servers.append(srv)
        return srv.start()

    yield make
    for srv in servers:
        srv.stop()


def _failed_logins(srv: ServerProcess, forwarded_for: list[str]) -> list[int]:
    """One request per address, each with another made-up credential ID and the address in
    ``X-Forwarded-For``: the statuses."""
    statuses = []
    with httpx.Client(base_url=srv.url, timeout=10 * UNIT) as http:
        for address in forwarded_for:
            bearer = f"{new_id(0)}.{'0' * 64}"
            statuses.append(http.get("/v1/queues", headers={
                "Authorization": f"Bearer {bearer}", "X-Forwarded-For": address}).status_code)
    return statuses


def test_forwarded_addresses_are_ignored_unless_proxies_are_named(
        start: Callable[..., ServerProcess]) -> None:
    srv = start()
    addresses = [f"203.0.113.{i}" for i in range(BURST + 3)]
    # Every request is the same peer's (127.0.0.1): its budget ends after the burst.
    assert _failed_logins(srv, addresses) == [401] * BURST + [429] * 3


def test_a_named_proxy_forwards_the_client_address(
        start: Callable[..., ServerProcess]) -> None:
    srv = start("--forwarded-allow-ips", "127.0.0.1")
    # Each forwarded client has its own budget...
    assert _failed_logins(srv, [f"203.0.113.{i}" for i in range(BURST + 3)]) == [401] * (
        BURST + 3)
    # ...and one client's failures through the proxy are counted as its own.
    assert _failed_logins(srv, ["198.51.100.7"] * (BURST + 1)) == [401] * BURST + [429]
