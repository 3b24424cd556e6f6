"""`orbit-server`: serve (the default), migrate, bootstrap-admin. Commands only parse and call."""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from orbit_host.logs import LOG_FORMATS, configure_logging
from orbit_host.version import DISTRIBUTION
from orbit_wire.errors import OrbitError

_DB_HELP = "Database URL (sqlite:///PATH or mysql://...); default: ORBIT_DB or the XDG data dir."


@contextlib.contextmanager
def _one_line_errors() -> Iterator[None]:
    """Database and file errors become one line (no traceback, no URL with a password)."""
    from sqlalchemy.exc import SQLAlchemyError

    try:
        yield
    except OrbitError as exc:
        raise click.ClickException(f"{exc.code.value}: {exc.message}") from None
    except SQLAlchemyError as exc:
        detail = str(getattr(exc, "orig", None) or type(exc).__name__).splitlines()[0]
        raise click.ClickException(f"database error: {detail}") from None
    except OSError as exc:
        raise click.ClickException(f"{exc.strerror or exc}: {exc.filename or ''}") from None


def _config(**overrides: Any) -> Any:
    """A ServerConfig with defaults (environment included) and the options that were given."""
    from .config import ServerConfig

    given = {k: v for k, v in overrides.items() if v is not None}
    try:
        return ServerConfig.from_env(**given)
    except OrbitError as exc:
        raise click.UsageError(exc.message) from None


def _token_file(path: str | None) -> str | None:
    """The token in a file (its first line, stripped): a token never goes on a command line,
    where every local user could read it in the process list."""
    if path is None:
        return None
    try:
        token = Path(path).read_text().strip().splitlines()
    except OSError as exc:
        raise click.BadParameter(f"cannot read {path}: {exc.strerror}",
                                 param_hint="--metrics-token-file") from None
    if not token:
        raise click.BadParameter(f"{path} is empty", param_hint="--metrics-token-file")
    return token[0].strip()


_UNITS_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def _duration_ms(text: str, option: str) -> int:
    """``30d``, ``12h``, ``90m``, ``45s``, ``500ms`` or ``0`` as milliseconds."""
    raw = text.strip().lower()
    number = raw.rstrip("smhd")
    unit = raw[len(number):] or ("ms" if number == "0" else "")
    if not number.isdigit() or unit not in _UNITS_MS:
        raise click.BadParameter(f"{text!r} is not a duration like 30d, 12h, 90m or 0",
                                 param_hint=option)
    return int(number) * _UNITS_MS[unit]


@click.group(invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name=DISTRIBUTION, prog_name="orbit-server")
@click.pass_context
def main(ctx: click.Context) -> None:
    """The Orbit server: HTTP API and worker WebSocket endpoint on one port.

    Without a command, `serve` runs (settings from ORBIT_DB, ORBIT_HOST, ORBIT_PORT).
    """
    if ctx.invoked_subcommand is None:
        ctx.invoke(serve)


@main.command()
@click.option("--db", "db_url", envvar="ORBIT_DB", help=_DB_HELP)
@click.option("--host", envvar="ORBIT_HOST", help="Listen address (default 127.0.0.1).")
@click.option("--port", envvar="ORBIT_PORT", type=click.IntRange(0, 65535), help="Default 8080.")
@click.option("--tls-cert", type=click.Path(exists=True, dir_okay=False), help="PEM certificate.")
@click.option("--tls-key", type=click.Path(exists=True, dir_okay=False), help="PEM private key.")
@click.option("--session-ttl-ms", type=click.IntRange(100, 600_000),
              help="Close a worker connection silent this long (default 15000).")
@click.option("--kill-grace-ms", type=click.IntRange(0, 600_000),
              help="Extra wait after a lease expiry before a retry may start (default 2000).")
@click.option("--reaper-interval-ms", type=click.IntRange(1, 60_000),
              help="Lease reaper period (default 100; 1000 on SQLite, where the server "
                   "knows every due instant itself).")
@click.option("--receipt-retention-hours", type=click.IntRange(1, 87_600),
              help="Delete operation receipts this many hours old (default 24).")
@click.option("--auth-failures-per-s", type=click.FloatRange(0, 1e6),
              help="Failed authentications per credential ID and per peer, after a burst "
                   "(default 1; 0 disables).")
@click.option("--auth-failures-burst", type=click.IntRange(1, 10**6), help="Default 20.")
@click.option("--submits-per-s", type=click.FloatRange(0, 1e9),
              help="Tasks one credential may submit per second (default 10000; 0 disables).")
@click.option("--submits-burst", type=click.IntRange(1, 10**9), help="Default 50000.")
@click.option("--max-sessions-per-credential", type=click.IntRange(1, 10**6),
              help="Worker connections one credential may hold here (default 64).")
@click.option("--max-sessions", type=click.IntRange(1, 10**7),
              help="Worker connections in all (default 10000).")
@click.option("--hello-timeout-ms", type=click.IntRange(100, 600_000),
              help="Close a WebSocket that sent no hello this long (default 10000).")
@click.option("--header-timeout-ms", type=click.IntRange(0, 3_600_000),
              help="Close a connection whose request headers are not complete this long "
                   "after it opened or the request began, with 408 (default 10000; 0: none).")
@click.option("--body-timeout-ms", type=click.IntRange(0, 3_600_000),
              help="Close a connection whose request body has not arrived whole this long "
                   "after its headers, with 408 (default 30000; 0: none).")
@click.option("--limit-concurrency", type=click.IntRange(1, 10**7),
              help="Connections and requests at once before uvicorn answers 503 "
                   "(default 20000).")
@click.option("--timeout-keep-alive", type=click.IntRange(1, 3600),
              help="Seconds an idle HTTP keep-alive connection stays open (default 5).")
@click.option("--forwarded-allow-ips", metavar="ADDRESSES",
              help="Proxies trusted to name the client in X-Forwarded-For and "
                   "X-Forwarded-Proto: comma-separated addresses or networks, or * "
                   "(default: none; the headers are ignored).")
@click.option("--task-retention", metavar="DURATION",
              help="Delete finished tasks this long after they finished, e.g. 30d, 12h, 90m; "
                   "0 keeps them (default 30d).")
@click.option("--metrics/--no-metrics", default=None,
              help="Serve GET /metrics for Prometheus (default: on).")
@click.option("--metrics-token-file", type=click.Path(exists=True, dir_okay=False),
              help="Serve /metrics only to requests bearing the token in this file "
                   "(or ORBIT_METRICS_TOKEN); default: open.")
@click.option("--metrics-refresh-ms", type=click.IntRange(0, 3_600_000),
              help="Count tasks by queue and state for /metrics at most this often "
                   "(default 5000).")
@click.option("--log-level", default="info",
              type=click.Choice(["critical", "error", "warning", "info", "debug"]))
@click.option("--log-format", default="text", show_default=True,
              type=click.Choice(LOG_FORMATS),
              help="text for people; json: one record per line (docs/observability.md).")
@click.option("--access-log/--no-access-log", default=True, show_default=True,
              help="One record per HTTP request (method, route, status, duration).")
@click.option("--durability", type=click.Choice(["full", "process"]),
              help="SQLite: full (default) answers a step once it is on disk; process once "
                   "the server process could crash without losing it (a power loss may lose "
                   "up to 1 s of answered steps; docs/deployment.md).")
def serve(db_url: str | None = None, host: str | None = None, port: int | None = None,
          tls_cert: str | None = None, tls_key: str | None = None,
          session_ttl_ms: int | None = None, kill_grace_ms: int | None = None,
          reaper_interval_ms: int | None = None, receipt_retention_hours: int | None = None,
          auth_failures_per_s: float | None = None, auth_failures_burst: int | None = None,
          submits_per_s: float | None = None, submits_burst: int | None = None,
          max_sessions_per_credential: int | None = None, max_sessions: int | None = None,
          hello_timeout_ms: int | None = None, header_timeout_ms: int | None = None,
          body_timeout_ms: int | None = None, limit_concurrency: int | None = None,
          timeout_keep_alive: int | None = None, forwarded_allow_ips: str | None = None,
          task_retention: str | None = None, metrics: bool | None = None,
          metrics_token_file: str | None = None, metrics_refresh_ms: int | None = None,
          log_level: str = "info", log_format: str = "text", access_log: bool = True,
          durability: str | None = None) -> None:
    """Migrate the database to the latest schema and serve until SIGTERM/SIGINT."""
    from .app import serve as run

    if (tls_cert is None) != (tls_key is None):
        raise click.UsageError("--tls-cert and --tls-key go together")
    configure_logging(log_level, log_format)
    if not access_log:
        logging.getLogger("orbit.access").setLevel(logging.WARNING)
    if log_level != "debug":  # Alembic narrates every migration step at info
        logging.getLogger("alembic").setLevel(logging.WARNING)
    config = _config(db_url=db_url, host=host, port=port, tls_cert=tls_cert, tls_key=tls_key,
                     session_ttl_ms=session_ttl_ms, kill_grace_ms=kill_grace_ms,
                     reaper_interval_ms=reaper_interval_ms,
                     receipt_retention_ms=None if receipt_retention_hours is None
                     else receipt_retention_hours * 3_600_000,
                     auth_failures_per_s=auth_failures_per_s,
                     auth_failures_burst=auth_failures_burst, submits_per_s=submits_per_s,
                     submits_burst=submits_burst,
                     max_sessions_per_credential=max_sessions_per_credential,
                     max_sessions=max_sessions, hello_timeout_ms=hello_timeout_ms,
                     header_timeout_ms=header_timeout_ms, body_timeout_ms=body_timeout_ms,
                     limit_concurrency=limit_concurrency, timeout_keep_alive=timeout_keep_alive,
                     forwarded_allow_ips=forwarded_allow_ips,
                     task_retention_ms=None if task_retention is None
                     else _duration_ms(task_retention, "--task-retention"),
                     metrics=metrics, metrics_refresh_ms=metrics_refresh_ms,
                     metrics_token=_token_file(metrics_token_file), durability=durability)
    with _one_line_errors():
        run(config, log_level=log_level)


@main.command()
@click.option("--db", "db_url", envvar="ORBIT_DB", help=_DB_HELP)
def migrate(db_url: str | None) -> None:
    """Create or upgrade the database schema to the latest version."""
    from .store.db import migrate as run

    config = _config(db_url=db_url)
    with _one_line_errors():
        run(config.db_url)
    click.echo("database is at the latest schema")


@main.command("bootstrap-admin")
@click.option("--db", "db_url", envvar="ORBIT_DB", help=_DB_HELP)
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="Credentials file to write (mode 0600).")
@click.option("--url", default=None, help="Server URL written into the file "
              "(default http://127.0.0.1:8080).")
@click.option("--name", default=None, help="A label for the credential.")
def bootstrap_admin(db_url: str | None, output: str, url: str | None, name: str | None) -> None:
    """Create an admin credential directly in the database and write its credentials file.

    Safe to run again: each run creates another admin credential.
    """
    from .bootstrap import bootstrap_admin as run

    config = _config(db_url=db_url)
    server_url = url or f"http://{config.host}:{config.port}"
    with _one_line_errors():
        credential_id = run(config, Path(output), server_url, name)
    click.echo(f"admin credential {credential_id} written to {output}")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
