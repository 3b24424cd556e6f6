"""``orbit-supervise [OPTIONS] MODULE:ATTR``: parse options, build a Supervisor, run it.

Signals: SIGTERM or SIGINT drain (logged at once: what runs, by queue, and what comes next);
a second one of either takes the shutdown-timeout path at once.
Errors found before connecting (credentials, handlers, options) print one line, no traceback.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from typing import Any, NoReturn

import click

from orbit_host import heap
from orbit_host.credentials import Credentials, CredentialsFileError, load_credentials
from orbit_host.isolation import (
    ChildIsolation,
    resolve_user,
    scrub_environment,
    secret_variables,
    set_not_dumpable,
)
from orbit_host.logs import LOG_FORMATS, configure_logging, fields
from orbit_host.tls import CaFileError
from orbit_host.version import DISTRIBUTION, installed_version
from orbit_wire.errors import HandlerSpecError, OrbitError
from orbit_wire.ids import is_id
from orbit_wire.labels import parse_labels

from . import defaults
from .app import Supervisor
from .errors import FatalSessionError, ShutdownTimeoutError, SupervisorError
from .options import (
    CHILD_CPU_MAX_RANGE,
    RECONNECT_MAX_DELAY_CEILING,
    RECONNECT_MIN_DELAY_FLOOR,
    SHUTDOWN_TIMEOUT_RANGE,
    WORKERS_RANGE,
    OptionError,
    QueueOutOfScope,
    parse_size,
)
from .template_link import set_child_isolation

EXIT_DRAINED = 0
EXIT_INTERNAL = 1
EXIT_USAGE = 2
EXIT_CREDENTIALS = 3
EXIT_HANDLERS = 4
EXIT_FATAL_SESSION = 5
EXIT_SHUTDOWN_TIMEOUT = 6

EPILOG = """\b
Exit codes:
  0  drained after SIGTERM/SIGINT: every result confirmed
  1  internal error
  2  usage: a bad option or value (the allowed range is printed)
  3  credentials file missing, unreadable or malformed
  4  handlers: MODULE:ATTR not importable or its handler list invalid
  5  fatal session error: authentication, permission or protocol
  6  shutdown timeout: children killed; unconfirmed and running counts printed
\b
Signals: SIGTERM or SIGINT drain; a second one stops at once (exit 6).
An unreachable server is retried with backoff, logging each attempt.
"""


class _SizeType(click.ParamType[int]):
    name = "SIZE"

    # click hands over the raw value: a string from the command line, or the int default.
    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None
                ) -> int:
        if isinstance(value, int):
            return value
        try:
            return parse_size(str(value))
        except OptionError as exc:
            self.fail(str(exc), param, ctx)


# The command's own last word (how it exits) is logged whatever --log-level says.
_EXIT_LOG = logging.getLogger("orbit.supervise")
_EXIT_LOG.setLevel(logging.INFO)
_json_log = False


def _setup_logging(level: str, fmt: str) -> None:
    global _json_log
    _json_log = fmt == "json"
    configure_logging(level, fmt)


def _say(code: int, message: str, **values: object) -> None:
    """How the command ends: one ``exit`` record in JSON, else one ``orbit-supervise:``
    line (the text people read at a terminal, as before the log format existed)."""
    if _json_log:
        _EXIT_LOG.log(logging.INFO if code == EXIT_DRAINED else logging.ERROR, "%s", message,
                      extra=fields("exit", exit_code=code, **values))
    else:
        click.echo(f"orbit-supervise: {message}", err=True)


def _fail(code: int, message: str) -> None:
    _say(code, message)
    sys.exit(code)


@click.command(epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("handlers", metavar="MODULE:ATTR")
@click.option("--url", "urls", envvar="ORBIT_URL", multiple=True, metavar="URL",
              help="Server URL; repeat it for failover, tried in order (ORBIT_URL: "
                   "space-separated); default: the credentials file's.")
@click.option("--credentials-file", envvar="ORBIT_CREDENTIALS_FILE", required=True,
              type=click.Path(dir_okay=False), help="Worker credentials file (0600).")
@click.option("--queue", "queue_ids", envvar="ORBIT_QUEUE_ID", multiple=True,
              help="Queue ID to serve; repeat it to serve several queues with the same "
                   "children (docs/supervisor.md, Several queues). Default: the "
                   "credentials file's only queue.")
@click.option("--workers", default=defaults.WORKERS, show_default=True,
              type=click.IntRange(*WORKERS_RANGE),
              help="Child processes (handlers running at once).")
@click.option("--prefetch", default=0, show_default=True, type=click.IntRange(0, None),
              help="Attempts started ahead of a free child, at most --workers: a finished "
                   "child starts its next handler at once, but a prefetched task waits "
                   "behind a running one with its lease ticking (docs/supervisor.md).")
@click.option("--grants/--no-grants", default=True, show_default=True,
              help="Ask for leases granted with the dispatch: a task arrives started and "
                   "runs without a separate start round trip (docs/protocol.md, Grants).")
@click.option("--shutdown-timeout", default=defaults.SHUTDOWN_TIMEOUT, show_default=True,
              type=click.FloatRange(*SHUTDOWN_TIMEOUT_RANGE),
              help="Seconds for the whole wind-down, counted from the stop signal.")
@click.option("--reconnect-min-delay", default=defaults.RECONNECT_MIN_DELAY, show_default=True,
              type=click.FloatRange(RECONNECT_MIN_DELAY_FLOOR, RECONNECT_MAX_DELAY_CEILING),
              help="Seconds; backoff start.")
@click.option("--reconnect-max-delay", default=defaults.RECONNECT_MAX_DELAY, show_default=True,
              type=click.FloatRange(RECONNECT_MIN_DELAY_FLOOR, RECONNECT_MAX_DELAY_CEILING),
              help="Seconds; backoff cap (>= min).")
@click.option("--max-tasks-per-child", type=click.IntRange(1, 2**31),
              help="Recycle a child after this many tasks.")
@click.option("--max-memory-per-child", type=_SizeType(),
              help="Kill/recycle a child over this RSS (bytes, or 512M, 2G).")
@click.option("--child-memory-max", type=_SizeType(),
              help="Memory each child may hold (bytes, or 512M, 2G), enforced by a control "
                   "group per child; the kernel's OOM kill is recorded MEMORY_LIMIT. Where "
                   "no memory cgroup is writable: the RSS watch (docs/supervisor.md).")
@click.option("--child-cpu-max", type=click.FloatRange(*CHILD_CPU_MAX_RANGE),
              help="CPUs each child may use (e.g. 1.5), enforced by a control group per "
                   "child (cpu.max, or cfs_quota_us on cgroup v1).")
@click.option("--child-user", metavar="USER[:GID]",
              help="Run the template and every child as this user (needs root).")
@click.option("--child-rlimit-as", type=_SizeType(),
              help="Address-space limit of the template and each child (bytes, or 2G).")
@click.option("--child-rlimit-cpu", type=click.IntRange(1, 2**31),
              help="CPU seconds a child may use over its life (RLIMIT_CPU).")
@click.option("--child-nofile", type=click.IntRange(16, 2**20),
              help="Open descriptors the template and each child may hold.")
@click.option("--ca-file", envvar="ORBIT_CA_FILE", type=click.Path(dir_okay=False),
              help="CA certificates (PEM) that verify the server's TLS certificate.")
@click.option("--child-nice", default=defaults.CHILD_NICE, show_default=True,
              type=click.IntRange(0, 19),
              help="Nice steps the children run below the supervisor (0: the same).")
@click.option("--report-exception-messages", is_flag=True, default=False,
              help="Also record the first line (at most 1 KiB) of the message of an "
                   "exception that ends a handler, with its type, in the attempt's details "
                   "and the task's failure: a risk you take, since a message may hold "
                   "payload data or secrets (docs/security.md). Off: the type name only.")
@click.option("--label", "labels", multiple=True, metavar="NAME=VALUE",
              help="What this host offers (repeatable, e.g. --label gpu=a100 --label "
                   "mem=64G): a task that requires labels is given only to a worker that has "
                   "them all. Names and values: 1-64 of [A-Za-z0-9_.:/-].")
@click.option("--metrics-port", type=click.IntRange(0, 65535),
              help="Serve Prometheus metrics over HTTP on this port (default: off).")
@click.option("--metrics-host", default="127.0.0.1", show_default=True,
              help="Address the metrics port listens on.")
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False))
@click.option("--log-format", default="text", show_default=True,
              type=click.Choice(LOG_FORMATS),
              help="text for people; json: one record per line (docs/observability.md).")
@click.version_option(package_name=DISTRIBUTION, prog_name="orbit-supervise")
def main(handlers: str, urls: tuple[str, ...], credentials_file: str, queue_ids: tuple[str, ...],
         workers: int, prefetch: int, grants: bool, shutdown_timeout: float,
         reconnect_min_delay: float,
         reconnect_max_delay: float, max_tasks_per_child: int | None,
         max_memory_per_child: int | None, child_memory_max: int | None,
         child_cpu_max: float | None, child_user: str | None,
         child_rlimit_as: int | None, child_rlimit_cpu: int | None, child_nofile: int | None,
         ca_file: str | None, child_nice: int, report_exception_messages: bool,
         labels: tuple[str, ...], metrics_port: int | None, metrics_host: str, log_level: str,
         log_format: str) -> None:
    """Run handlers from MODULE:ATTR in isolated child processes for one queue or several."""
    _setup_logging(log_level, log_format)
    try:
        offered = parse_labels(labels)
    except OrbitError as exc:
        _fail(EXIT_USAGE, f"--label: {exc.message}")
    try:
        creds = load_credentials(credentials_file)
    except CredentialsFileError as exc:
        _fail(EXIT_CREDENTIALS, exc.message)
    _harden(child_user, child_rlimit_as, child_rlimit_cpu, child_nofile)
    queues = _queues(queue_ids, creds)
    if ":" not in handlers:
        _fail(EXIT_USAGE, f"MODULE:ATTR expected, got {handlers!r}")
    try:
        sup = Supervisor(
            handlers, queues, creds, url=urls or None, workers=workers,
            shutdown_timeout=shutdown_timeout, reconnect_min_delay=reconnect_min_delay,
            reconnect_max_delay=reconnect_max_delay, max_tasks_per_child=max_tasks_per_child,
            max_memory_per_child=max_memory_per_child, child_nice=child_nice,
            child_memory_max=child_memory_max, child_cpu_max=child_cpu_max,
            prefetch=prefetch, grants=grants,
            report_exception_messages=report_exception_messages, labels=offered,
            reap_orphans=True,  # this process starts nothing but the template
            ca_file=ca_file, capture_child_output=True,
        )
    except CaFileError as exc:
        _fail(EXIT_USAGE, exc.message)
    except QueueOutOfScope as exc:
        _fail(EXIT_FATAL_SESSION, f"permission denied: {exc.message}")
    except (OptionError, ValueError) as exc:
        _fail(EXIT_USAGE, str(exc))
    heap.settle()  # the start-up heap out of every collection's walk
    with _runner() as runner:
        code = runner.run(_run(sup, metrics_host, metrics_port))
    _exit_now(code)


def _queues(queue_ids: tuple[str, ...], creds: Credentials) -> tuple[str, ...]:
    """The queues to serve: each ``--queue`` (ORBIT_QUEUE_ID may hold several, separated
    by spaces), else the credentials file's only queue."""
    if not queue_ids:
        if len(creds.queues) != 1:
            _fail(EXIT_USAGE, "--queue is required: the credentials file lists "
                              f"{len(creds.queues)} queues")
        return creds.queues[:1]
    for queue_id in queue_ids:
        if not is_id(queue_id):
            _fail(EXIT_USAGE, "--queue must be a 32-character lowercase hex queue ID, got "
                              f"{queue_id!r}")
    return queue_ids


def _exit_now(code: int) -> NoReturn:
    """End the process as soon as the run is over: the children are reaped, the connections
    closed and every log record written, so nothing is left for the interpreter's teardown,
    which on a loaded host took longer than the half second a shutdown timeout may overrun
    (docs/supervisor.md, "Signals")."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _runner() -> asyncio.Runner:
    """The event loop: uvloop where it is installed (a dependency on Linux), whose sockets,
    timers and callbacks cost the parent less CPU per task; asyncio's own elsewhere."""
    try:
        import uvloop
    except ImportError:
        return asyncio.Runner()
    return asyncio.Runner(loop_factory=uvloop.new_event_loop)


def _harden(child_user: str | None, rlimit_as: int | None, rlimit_cpu: int | None,
            nofile: int | None) -> None:
    """Once the credentials are read: no handler may read them from this process (it is not
    dumpable, the secret-bearing variables are gone from its environment), and the children
    get their user and limits (docs/security.md)."""
    try:
        set_not_dumpable()
    except OSError as exc:
        _fail(EXIT_INTERNAL, f"cannot make the supervisor non-dumpable: {exc}")
    scrub_environment(secret_variables(os.environ))
    uid = gid = None
    if child_user is not None:
        try:
            uid, gid = resolve_user(child_user)
        except (KeyError, ValueError):
            _fail(EXIT_USAGE, f"--child-user: no such user {child_user!r}")
        if os.geteuid() != 0 and uid != os.geteuid():
            _fail(EXIT_USAGE, "--child-user needs the supervisor to run as root")
    set_child_isolation(ChildIsolation(uid, gid, rlimit_as, rlimit_cpu, nofile))


async def _run(sup: Supervisor, metrics_host: str, metrics_port: int | None) -> int:
    loop = asyncio.get_running_loop()
    metrics = None
    if metrics_port is not None:  # prometheus_client is loaded only then
        from .metrics import MetricsServer

        try:
            metrics = MetricsServer(sup, metrics_host, metrics_port, installed_version())
        except OSError as exc:
            click.echo(f"orbit-supervise: --metrics-port: cannot listen on {metrics_host}:"
                       f"{metrics_port}: {exc.strerror or exc}", err=True)
            return EXIT_USAGE
        logging.getLogger("orbit.supervisor").info(
            "metrics on http://%s:%d/metrics", metrics_host, metrics.port)
    try:
        return await _supervise(sup, loop)
    finally:
        if metrics is not None:
            metrics.close()


async def _supervise(sup: Supervisor, loop: asyncio.AbstractEventLoop) -> int:
    signals = 0

    def on_signal(sig: signal.Signals) -> None:
        nonlocal signals
        signals += 1
        _log_stop(sup, sig, forced=signals > 1)
        sup.stop(force=signals > 1)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        await sup.run()
    except HandlerSpecError as exc:
        return _ended(EXIT_HANDLERS, f"handlers: {exc.message}")
    except FatalSessionError as exc:
        return _ended(EXIT_FATAL_SESSION, f"fatal session error: {exc.message} "
                      f"(unconfirmed={exc.unconfirmed} running={exc.running})",
                      unconfirmed=exc.unconfirmed, running=exc.running)
    except ShutdownTimeoutError as exc:
        return _ended(EXIT_SHUTDOWN_TIMEOUT, f"{exc.message} "
                      f"(unconfirmed={exc.unconfirmed} running={exc.running})",
                      unconfirmed=exc.unconfirmed, running=exc.running)
    except SupervisorError as exc:
        return _ended(EXIT_INTERNAL, exc.message)
    except Exception:
        logging.getLogger("orbit.supervisor").exception(
            "internal error", extra=fields("internal_error", where="the run"))
        return _ended(EXIT_INTERNAL, "internal error (see the log above)")
    stats = sup.stats()
    confirmed = stats.reports_confirmed + stats.evidence_confirmed
    return _ended(EXIT_DRAINED, f"drained started={stats.started} confirmed={confirmed} "
                  f"running={stats.running}", started=stats.started, confirmed=confirmed,
                  running=stats.running)


# The running attempts the first stop signal's record names (the rest are counted).
_NAMED_AT_STOP = 8


def _log_stop(sup: Supervisor, sig: signal.Signals, *, forced: bool) -> None:
    """Say at once what a stop signal does: what is drained, for how long, and what a
    second signal would do (or, for that second one, that it does it now)."""
    running = sup.running_by_queue()
    total = sum(running.values())
    log = logging.getLogger("orbit.supervisor")
    if forced:
        log.warning("%s again: killing %d running handler(s) now and reporting them",
                    sig.name, total, extra=fields("stopping", signal=sig.name, forced=True,
                                                   running=total, queues=running))
        return
    by_queue = ", ".join(f"{n} on queue {q}" for q, n in running.items())
    attempts = sup.running_attempts()
    named = "; ".join(f"task {t} attempt {a}" for t, a in attempts[:_NAMED_AT_STOP])
    if len(attempts) > _NAMED_AT_STOP:
        named += f"; {len(attempts) - _NAMED_AT_STOP} more"
    timeout = sup.options.shutdown_timeout
    log.warning("%s: draining: no new tasks; waiting for %d running handler(s) (%s%s) for at "
                "most %g s (--shutdown-timeout), then they are killed and reported; a "
                "second SIGINT or SIGTERM kills them now", sig.name, total, by_queue or
                "none", f": {named}" if named else "", timeout, extra=fields(
                    "stopping", signal=sig.name, forced=False, running=total, queues=running,
                    attempts=[a for _, a in attempts], shutdown_timeout_s=timeout))


def _ended(code: int, message: str, **values: object) -> int:
    _say(code, message, **values)
    return code


if __name__ == "__main__":
    main()
