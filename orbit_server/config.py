"""Server configuration: one frozen dataclass with its defaults (docs/deployment.md, docs/cli.md).

``ServerConfig.from_env`` reads ORBIT_DB, ORBIT_HOST, ORBIT_PORT and ORBIT_METRICS_TOKEN;
explicit keyword arguments (the CLI's options) win over the environment. Nothing here
touches the disk: the
SQLite directory is created by ``orbit_server.store.db.create_engine_for``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from orbit_wire.errors import ErrorCode, OrbitError

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
MIN_RECEIPT_RETENTION_MS = HOUR_MS
MIN_METRICS_TOKEN_LEN = 16


def default_db_url(env: Mapping[str, str] | None = None) -> str:
    """``sqlite:///${XDG_DATA_HOME:-~/.local/share}/orbit/orbit.db`` (directory not created)."""
    env = os.environ if env is None else env
    base = env.get("XDG_DATA_HOME") or str(Path("~/.local/share").expanduser())
    return f"sqlite:///{Path(base) / 'orbit' / 'orbit.db'}"


@dataclass(frozen=True)
class ServerConfig:
    db_url: str = field(default_factory=default_db_url)
    host: str = "127.0.0.1"
    port: int = 8080
    tls_cert: str | None = None
    tls_key: str | None = None
    # A worker connection silent for this long is closed; its reservations are released.
    session_ttl_ms: int = 15_000
    # Covers the worker's kill latency and clock-rate error after a lease expiry.
    kill_grace_ms: int = 2_000
    # The lease reaper's period: None is REAPER_INTERVAL_MS on a shared database, where other
    # replicas' leases and deadlines fall due unannounced, and REAPER_INTERVAL_SQLITE_MS on a
    # SQLite file, whose one server announces every due instant itself (a safety net only).
    reaper_interval_ms: int | None = None
    # Verified bearer tokens are cached this long so other replicas' revocations apply.
    auth_cache_ms: int = 5_000
    # Rows the reaper (and the receipt pruner) handles per category in one transaction.
    reap_batch: int = 1_000
    # Failed authentications allowed per credential ID and per peer address: a burst, then
    # this many per second (429 RATE_LIMITED with Retry-After past it; 0 disables).
    auth_failures_per_s: float = 1.0
    auth_failures_burst: int = 20
    # Tasks a credential may submit per second, with a burst (0 disables).
    submits_per_s: float = 10_000.0
    submits_burst: int = 50_000
    # Worker connections one credential may hold at once on this server, and in all.
    max_sessions_per_credential: int = 64
    max_sessions: int = 10_000
    # A WebSocket that has not said hello this long after its handshake is closed.
    hello_timeout_ms: int = 10_000
    # Slow clients (orbit_server/http_transport.py): request headers complete within this
    # long of the connection or the request's first byte, a body within this long of its
    # headers, else 408 and close (0 disables).
    header_timeout_ms: int = 10_000
    body_timeout_ms: int = 30_000
    # uvicorn's own limits: connections and requests at once (503 past it), and how long an
    # idle keep-alive connection stays open.
    limit_concurrency: int = 20_000
    timeout_keep_alive: int = 5
    # The proxies whose X-Forwarded-For / X-Forwarded-Proto name the client (comma-separated
    # addresses or networks, "*" for any); None: forwarded headers are ignored, and every
    # per-address limit counts the connection's own peer.
    forwarded_allow_ips: str | None = None
    # Replicas on a shared database read each other's cancels and revocations this often.
    push_poll_ms: int = 500
    # Operation receipts are deleted this long after they were written.
    receipt_retention_ms: int = 24 * HOUR_MS
    # Finished tasks (with their attempts, evidence, audit) are deleted this long after they
    # finished; 0 keeps them.
    task_retention_ms: int = 30 * DAY_MS
    # GET /metrics (docs/observability.md): served unless off; with a token, only to a
    # request bearing it (docs/security.md). Tasks by queue and state are counted from the
    # database at most once per metrics_refresh_ms, when scraped.
    metrics: bool = True
    metrics_token: str | None = field(default=None, repr=False)
    metrics_refresh_ms: int = 5_000
    # Queued store calls run in one transaction with one commit, at most this many (1: each
    # call commits alone).
    group_commit_max: int = 32
    # SQLite only (orbit_server/wal_sync.py, docs/deployment.md "Durability"): "full" answers
    # a step once it is on disk; "process" answers once it is in the kernel's page cache and
    # syncs every second, so a power loss may lose up to a second of acknowledged steps.
    durability: str = "full"

    def __post_init__(self) -> None:
        for name in ("session_ttl_ms", "reaper_interval_ms", "reap_batch", "push_poll_ms",
                     "group_commit_max"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise OrbitError(ErrorCode.BAD_REQUEST, f"{name} must be positive")
        if self.receipt_retention_ms < MIN_RECEIPT_RETENTION_MS:
            # A receipt must outlive every lease it could concern (lease TTL <= 10 min).
            raise OrbitError(ErrorCode.BAD_REQUEST, "receipt_retention_ms must be >= 1 hour")
        if self.task_retention_ms < 0:
            raise OrbitError(ErrorCode.BAD_REQUEST, "task_retention_ms must be >= 0 (0 keeps)")
        if self.kill_grace_ms < 0 or self.auth_cache_ms < 0:
            raise OrbitError(ErrorCode.BAD_REQUEST, "kill_grace_ms and auth_cache_ms must be >= 0")
        if self.metrics_refresh_ms < 0:
            raise OrbitError(ErrorCode.BAD_REQUEST, "metrics_refresh_ms must be >= 0")
        if self.metrics_token is not None and len(self.metrics_token) < MIN_METRICS_TOKEN_LEN:
            raise OrbitError(ErrorCode.BAD_REQUEST, f"the metrics token must be at least "
                             f"{MIN_METRICS_TOKEN_LEN} characters")
        if self.durability not in ("full", "process"):
            raise OrbitError(ErrorCode.BAD_REQUEST,
                             f"durability must be full or process, not {self.durability!r}")
        if not 0 <= self.port <= 65535:
            raise OrbitError(ErrorCode.BAD_REQUEST, f"port {self.port} is out of range")

    @property
    def heartbeat_ms(self) -> int:
        """What `welcome` announces: min(TTL/3, 5000)."""
        return max(1, min(self.session_ttl_ms // 3, 5_000))

    @property
    def reservation_ttl_ms(self) -> int:
        """An unstarted reservation older than this is released by the reaper."""
        return 2 * self.session_ttl_ms

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> ServerConfig:
        """Defaults, then ORBIT_DB/ORBIT_HOST/ORBIT_PORT/ORBIT_METRICS_TOKEN, then
        ``overrides`` that are not None."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {"db_url": default_db_url(env)}
        if env.get("ORBIT_DB"):
            values["db_url"] = env["ORBIT_DB"]
        if env.get("ORBIT_HOST"):
            values["host"] = env["ORBIT_HOST"]
        if env.get("ORBIT_PORT"):
            try:
                values["port"] = int(env["ORBIT_PORT"])
            except ValueError:
                raise OrbitError(ErrorCode.BAD_REQUEST, "ORBIT_PORT must be an integer") from None
        if env.get("ORBIT_METRICS_TOKEN"):
            values["metrics_token"] = env["ORBIT_METRICS_TOKEN"]
        known = {f.name for f in fields(cls)}
        for key, value in overrides.items():
            if key not in known:
                raise TypeError(f"unknown ServerConfig field {key!r}")
            if value is not None:
                values[key] = value
        return replace(cls(), **values)
