"""The ``orbit`` command: parses arguments and calls OrbitClient; nothing else happens here.

Exit codes: 0 ok, 1 the server answered with an error, 2 usage or input refused before
sending, 3 credentials file problem, 4 server unreachable. Errors are one line on stderr:
``orbit: CODE: message``. docs/cli.md documents every command.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
import orjson

from orbit_host.credentials import Credentials, CredentialsFileError, load_credentials
from orbit_host.version import DISTRIBUTION
from orbit_wire.errors import ErrorCode, OrbitError
from orbit_wire.jsonvalue import check_text

from .client import OrbitClient
from .durations import parse_duration_ms, parse_instant_ms
from .errors import OrbitApiError, ServerUnreachable

EXIT_API = 1
EXIT_USAGE = 2
EXIT_CREDENTIALS = 3
EXIT_UNREACHABLE = 4


def exit_code_for(exc: OrbitError) -> int:
    """Which exit code an error ends the command with."""
    if isinstance(exc, CredentialsFileError):
        return EXIT_CREDENTIALS
    if isinstance(exc, ServerUnreachable):
        return EXIT_UNREACHABLE
    if isinstance(exc, OrbitApiError) and exc.status is not None:
        return EXIT_API
    return EXIT_USAGE  # refused locally: bad ID, bad JSON, out-of-range option


class _OrbitGroup(click.Group):
    """Turns every OrbitError raised by a command into one stderr line and its exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except OrbitError as exc:
            message = " ".join(exc.message.split())
            click.echo(f"orbit: {exc.code.value}: {message}", err=True)
            ctx.exit(exit_code_for(exc))


class _Settings:
    def __init__(self, url: str | None, credentials_file: str | None, timeout: float):
        self.url = url
        self.credentials_file = credentials_file
        self.timeout = timeout
        self._client: OrbitClient | None = None

    def client(self, ctx: click.Context, *, needs_credentials: bool = True) -> OrbitClient:
        if self._client is None:
            creds: Credentials | None = None
            if self.credentials_file:
                creds = load_credentials(self.credentials_file)
            elif needs_credentials:
                raise CredentialsFileError(
                    "no credentials: pass --credentials-file or set ORBIT_CREDENTIALS_FILE"
                )
            self._client = OrbitClient(self.url, creds, timeout=self.timeout)
            ctx.call_on_close(self._client.close)
        return self._client


def _client(ctx: click.Context, *, needs_credentials: bool = True) -> OrbitClient:
    settings: _Settings = ctx.find_object(_Settings)  # type: ignore[assignment]
    return settings.client(ctx.find_root(), needs_credentials=needs_credentials)


def _print_json(value: Any) -> None:
    click.echo(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode())


def _print_task(task: dict[str, Any]) -> None:
    # Print the result exactly as the handler produced it, not as re-encoded floats.
    task = dict(task)
    raw = task.pop("result_json", None)
    if raw is not None:
        task["result"] = orjson.Fragment(raw)
    _print_json(task)


def _json_argument(text: str, what: str) -> orjson.Fragment:
    """A JSON value given inline, as @FILE, or as @- (stdin); checked, kept as exact text."""
    if text.startswith("@"):
        name = text[1:]
        try:
            data = sys.stdin.buffer.read() if name == "-" else Path(name).read_bytes()
        except OSError as exc:
            raise OrbitError(ErrorCode.BAD_REQUEST, f"{what} file {name}: {exc.strerror}") from None
    else:
        data = text.encode()
    check_text(data, what=what)
    return orjson.Fragment(data.strip())


_wait_option = click.option(
    "--wait",
    "wait_s",
    type=click.FloatRange(min=0),
    default=None,
    help="Wait up to SECONDS for the task to finish or need review.",
)


_EPILOG = (
    "Exit codes: 0 ok, 1 the server answered with an error, 2 usage or input refused "
    "before sending, 3 credentials file problem, 4 server unreachable. Errors are one line "
    "on stderr: 'orbit: CODE: message'. See docs/cli.md."
)


@click.group(
    cls=_OrbitGroup, epilog=_EPILOG, context_settings={"help_option_names": ["-h", "--help"]}
)
@click.version_option(package_name=DISTRIBUTION, prog_name="orbit")
@click.option("--url", envvar="ORBIT_URL", help="Server URL (default: the credentials' URL).")
@click.option(
    "--credentials-file",
    envvar="ORBIT_CREDENTIALS_FILE",
    type=click.Path(dir_okay=False),
    help="Credentials file to authenticate with.",
)
@click.option(
    "--timeout", type=click.FloatRange(min=0.001), default=30.0, show_default=True,
    help="Seconds to wait for the server (long polls add their wait).",
)
@click.pass_context
def cli(ctx: click.Context, url: str | None, credentials_file: str | None, timeout: float) -> None:
    """Submit and inspect Orbit tasks, and manage queues and credentials."""
    ctx.obj = _Settings(url, credentials_file, timeout)


@cli.command()
@click.pass_context
def health(ctx: click.Context) -> None:
    """Check that the server answers."""
    _print_json(_client(ctx, needs_credentials=False).health())


# ------------------------------------------------------------------------------- queues


@cli.group()
def queues() -> None:
    """Create queues and read their statistics (admin; stats also producer)."""


@queues.command("create")
@click.option("--name", default=None, help="A name for people; the ID is what counts.")
@click.option("--json", "as_json", is_flag=True, help="Print the whole queue as JSON.")
@click.pass_context
def queues_create(ctx: click.Context, name: str | None, as_json: bool) -> None:
    """Create a queue and print its ID."""
    queue = _client(ctx).create_queue(name)
    if as_json:
        _print_json(queue)
    else:
        click.echo(queue["id"])


@queues.command("stats")
@click.argument("queue_id")
@click.pass_context
def queues_stats(ctx: click.Context, queue_id: str) -> None:
    """Print task counts by state, running attempts and the oldest pending age."""
    _print_json(_client(ctx).queue_stats(queue_id))


# -------------------------------------------------------------------------- credentials


@cli.group()
def credentials() -> None:
    """Create and revoke credentials (admin)."""


@credentials.command("create")
@click.option(
    "--role", required=True, type=click.Choice(["worker", "producer", "admin"]),
    help="What the credential may do.",
)
@click.option("--queue", "queue_ids", multiple=True, help="A queue it may use (repeatable).")
@click.option("--name", default=None, help="A name for people.")
@click.option(
    "-o", "--output", required=True,
    help="Credentials file to write (mode 0600); '-' prints it, secret included, to stdout.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the credential (no secret) as JSON.")
@click.pass_context
def credentials_create(
    ctx: click.Context,
    role: str,
    queue_ids: tuple[str, ...],
    name: str | None,
    output: str,
    as_json: bool,
) -> None:
    """Create a credential and write its credentials file; print its ID, never the secret."""
    client = _client(ctx)
    if output == "-":
        creds = client.create_credential(role, list(queue_ids), name)
        click.echo(creds.to_json().decode())
        return
    creds = client.create_credential(role, list(queue_ids), name, path=output)
    if as_json:
        _print_json(
            {"credential_id": creds.credential_id, "role": creds.role,
             "queues": list(creds.queues), "name": name, "file": output}
        )
    else:
        click.echo(creds.credential_id)


@credentials.command("revoke")
@click.argument("credential_id")
@click.pass_context
def credentials_revoke(ctx: click.Context, credential_id: str) -> None:
    """Revoke a credential; requests made with it are refused from now on."""
    _print_json(_client(ctx).revoke_credential(credential_id))


# -------------------------------------------------------------------------------- tasks


@cli.group()
def tasks() -> None:
    """Submit, read, cancel and review tasks (producer)."""


@tasks.command("submit")
@click.option("--queue", "queue_id", required=True, help="Queue ID.")
@click.option("--handler", required=True, help="Capability: handler name.")
@click.option("--handler-version", required=True, help="Capability: handler version.")
@click.option("--payload-version", required=True, help="Capability: payload version.")
@click.option("--payload", required=True, help="Payload JSON, or @FILE, or @- for stdin.")
@click.option("--idempotent", is_flag=True, help="Safe to retry after an uncertain outcome.")
@click.option("--max-attempts", type=click.IntRange(1, 100), default=None)
@click.option("--operation-key", default=None, help="Submitting the same key returns one task.")
@click.option("--lease-ttl-ms", type=int, default=None)
@click.option("--attempt-timeout-ms", type=int, default=None)
@click.option("--deadline-ms", type=int, default=None,
              help="Total deadline, from when the task may first run.")
@click.option("--delay", default=None, help="Run no earlier than this from now: 500ms, 30s, 5m.")
@click.option("--not-before", default=None,
              help="Run no earlier than this instant: ISO 8601 with offset, or epoch ms.")
@click.option("--priority", type=click.IntRange(0, 9), default=None,
              help="0-9, higher dispatched first (default 5).")
@click.option("--json", "as_json", is_flag=True, help="Print the task as JSON, not its ID.")
@_wait_option
@click.pass_context
def tasks_submit(
    ctx: click.Context,
    queue_id: str,
    handler: str,
    handler_version: str,
    payload_version: str,
    payload: str,
    idempotent: bool,
    max_attempts: int | None,
    operation_key: str | None,
    lease_ttl_ms: int | None,
    attempt_timeout_ms: int | None,
    deadline_ms: int | None,
    delay: str | None,
    not_before: str | None,
    priority: int | None,
    as_json: bool,
    wait_s: float | None,
) -> None:
    """Submit one task and print its ID (with --wait: the task once settled, as JSON)."""
    spec: dict[str, Any] = {
        "handler": handler,
        "handler_version": handler_version,
        "payload_version": payload_version,
        "payload": _json_argument(payload, "payload"),
        "idempotency": "IDEMPOTENT" if idempotent else "NON_IDEMPOTENT",
    }
    optional = {
        "max_attempts": max_attempts,
        "operation_key": operation_key,
        "lease_ttl_ms": lease_ttl_ms,
        "attempt_timeout_ms": attempt_timeout_ms,
        "deadline_ms": deadline_ms,
        "delay_ms": None if delay is None else parse_duration_ms(delay, "--delay"),
        "not_before_at_ms": (None if not_before is None
                             else parse_instant_ms(not_before, "--not-before")),
        "priority": priority,
    }
    spec.update({k: v for k, v in optional.items() if v is not None})
    client = _client(ctx)
    task = client.submit(queue_id, spec)
    if wait_s is not None:
        _print_task(client.wait(task["id"], wait_s))
    elif as_json:
        _print_task(task)
    else:
        click.echo(task["id"])


@tasks.command("get")
@click.argument("task_id")
@_wait_option
@click.pass_context
def tasks_get(ctx: click.Context, task_id: str, wait_s: float | None) -> None:
    """Print a task (with --wait: once settled or when the wait ends)."""
    client = _client(ctx)
    task = client.get_task(task_id) if wait_s is None else client.wait(task_id, wait_s)
    _print_task(task)


@tasks.command("attempts")
@click.argument("task_id")
@click.pass_context
def tasks_attempts(ctx: click.Context, task_id: str) -> None:
    """Print the attempt history and the evidence of a task."""
    _print_json(_client(ctx).attempts(task_id))


@tasks.command("audit")
@click.argument("task_id")
@click.pass_context
def tasks_audit(ctx: click.Context, task_id: str) -> None:
    """Print every state change of a task and its attempts."""
    _print_json(_client(ctx).audit(task_id))


@tasks.command("cancel")
@click.argument("task_id")
@click.option("--reason", default=None)
@click.pass_context
def tasks_cancel(ctx: click.Context, task_id: str, reason: str | None) -> None:
    """Cancel a task (a running one is killed on its worker); print it."""
    _print_task(_client(ctx).cancel(task_id, reason))


@tasks.command("review")
@click.argument("task_id")
@click.option("--retry", is_flag=True, help="Run it once more.")
@click.option("--succeed", is_flag=True, help="Mark it succeeded.")
@click.option("--fail", is_flag=True, help="Mark it failed.")
@click.option("--result", default=None, help="With --succeed: result JSON, @FILE or @-.")
@click.option("--reason", default=None, help="Why, for the audit trail.")
@click.pass_context
def tasks_review(
    ctx: click.Context,
    task_id: str,
    retry: bool,
    succeed: bool,
    fail: bool,
    result: str | None,
    reason: str | None,
) -> None:
    """Resolve a task in NEEDS_REVIEW; the decision is audited."""
    chosen = [name for name, on in (("retry", retry), ("succeed", succeed), ("fail", fail)) if on]
    if len(chosen) != 1:
        raise click.UsageError("choose exactly one of --retry, --succeed, --fail")
    action = chosen[0]
    if result is not None and action != "succeed":
        raise click.UsageError("--result goes with --succeed only")
    value = None if result is None else _json_argument(result, "result")
    _print_task(_client(ctx).review(task_id, action, value, reason))


from .cli_schedules import schedules  # noqa: E402  (it uses the helpers above)

cli.add_command(schedules)


def main() -> None:
    cli(prog_name="orbit")


if __name__ == "__main__":
    main()
