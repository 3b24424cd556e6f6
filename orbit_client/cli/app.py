"""The root ``orbit`` group: global options, the one place they are turned into a client,
an output form and a default queue, and the error handler every command shares.

A new global option (say a CA file) is added here, in ``cli`` and ``Settings``; commands
only ever call ``settings(ctx)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import click

from orbit_host.credentials import Credentials, CredentialsFileError, load_credentials
from orbit_host.version import DISTRIBUTION
from orbit_wire.errors import OrbitError

from ..client import OrbitClient
from .exits import EPILOG, EXIT_INTERRUPTED, HOW_TO_GET_CREDENTIALS, exit_code_for, next_step
from .output import OUTPUT_MODES, Output, human_wanted

# Where `orbit-server serve` listens by default; used only when nothing names a server.
DEFAULT_URL = "http://127.0.0.1:8080"


@dataclass
class Settings:
    url: str | None
    credentials_file: str | None
    timeout: float
    output_mode: str
    ca_file: str | None = None  # --ca-file / ORBIT_CA_FILE
    _creds: Credentials | None = field(default=None, repr=False)
    _client: OrbitClient | None = field(default=None, repr=False)

    def credentials(self) -> Credentials:
        if self._creds is None:
            if not self.credentials_file:
                raise CredentialsFileError(
                    "no credentials: pass --credentials-file FILE or set ORBIT_CREDENTIALS_FILE"
                )
            self._creds = load_credentials(self.credentials_file)
        return self._creds

    def server_url(self) -> str | None:
        """The URL errors should name: --url, else the credentials', if readable."""
        if self.url:
            return self.url
        if self._creds is not None:
            return self._creds.url
        return None

    def client(self, ctx: click.Context, *, anonymous: bool = False) -> OrbitClient:
        """The client for this command; ``anonymous`` for calls that need no credential
        (the URL then comes from --url, a readable credentials file, or DEFAULT_URL)."""
        if self._client is None:
            if anonymous:
                url = self.url or _url_of(self.credentials_file) or DEFAULT_URL
                self.url = url
                self._client = OrbitClient(url, None, timeout=self.timeout,
                                           ca_file=self.ca_file)
            else:
                self._client = OrbitClient(self.url, self.credentials(), timeout=self.timeout,
                                           ca_file=self.ca_file)
            ctx.find_root().call_on_close(self._client.close)
        return self._client

    def queue(self, given: str | None) -> str:
        """``given``, else the one queue the credential is scoped to."""
        if given:
            return given
        creds = self.credentials()
        if len(creds.queues) == 1:
            return creds.queues[0]
        if not creds.queues:
            raise click.UsageError(
                "--queue is needed: this credential is not scoped to one queue "
                "(`orbit queues list` shows the queues)"
            )
        raise click.UsageError(
            f"--queue is needed: this credential may use {len(creds.queues)} queues "
            f"({', '.join(creds.queues)})"
        )

    def output(self, as_json: bool) -> Output:
        return Output(human_wanted(self.output_mode, as_json))


def _url_of(credentials_file: str | None) -> str | None:
    if not credentials_file:
        return None
    try:
        return load_credentials(credentials_file).url
    except CredentialsFileError:
        return None


def settings(ctx: click.Context) -> Settings:
    found = ctx.find_object(Settings)
    assert found is not None, "the root group sets Settings"
    return found


class _OrbitGroup(click.Group):
    """Turns every OrbitError raised by a command into one stderr line and its exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except OrbitError as exc:
            found = ctx.find_object(Settings)
            click.echo(error_line(exc, found.server_url() if found else None), err=True)
            ctx.exit(exit_code_for(exc))
        except KeyboardInterrupt:
            # Ctrl-C only stops this command (a --wait, say); the task itself goes on.
            click.echo("orbit: interrupted", err=True)
            ctx.exit(EXIT_INTERRUPTED)


def error_line(exc: OrbitError, url: str | None, subject: str = "") -> str:
    """``orbit: CODE: [subject: ]message; what to do next`` on one line."""
    message = " ".join(exc.message.split())
    hint = next_step(exc, url)
    return f"orbit: {exc.code.value}: {subject}{message}" + (f"; {hint}" if hint else "")


@click.group(
    cls=_OrbitGroup, epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]}
)
@click.version_option(package_name=DISTRIBUTION, prog_name="orbit")
@click.option("--url", envvar="ORBIT_URL", help="Server URL (default: the credentials' URL).")
@click.option(
    "--credentials-file",
    envvar="ORBIT_CREDENTIALS_FILE",
    type=click.Path(dir_okay=False),
    help="Credentials file to authenticate with; " + HOW_TO_GET_CREDENTIALS + ".",
)
@click.option(
    "--timeout", type=click.FloatRange(min=0.001), default=30.0, show_default=True,
    help="Seconds to wait for the server (long polls add their wait).",
)
@click.option(
    "--output", "output_mode", envvar="ORBIT_OUTPUT", type=click.Choice(OUTPUT_MODES),
    default="auto", show_default=True,
    help="human (tables), json, or auto: human on a terminal, JSON on a pipe.",
)
@click.option(
    "--ca-file", envvar="ORBIT_CA_FILE", type=click.Path(dir_okay=False),
    help="CA certificates (PEM) that verify the server's TLS certificate.",
)
@click.pass_context
def cli(
    ctx: click.Context, url: str | None, credentials_file: str | None, timeout: float,
    output_mode: str, ca_file: str | None,
) -> None:
    """Submit, find and inspect Orbit tasks; manage queues, credentials and reviews."""
    ctx.obj = Settings(url, credentials_file, timeout, output_mode, ca_file)
