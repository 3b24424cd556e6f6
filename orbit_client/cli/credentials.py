"""``orbit credentials``: create, list, rotate and revoke credentials (admin)."""

from __future__ import annotations

import time

import click

from ..durations import parse_duration_ms
from .app import settings
from .output import json_option
from .render import credentials_table


@click.group()
def credentials() -> None:
    """Create, list, rotate and revoke credentials (admin)."""


def _expiry(expires_in: str | None) -> int | None:
    """``--expires-in 30d`` as the instant it ends (ms since the epoch)."""
    if expires_in is None:
        return None
    return time.time_ns() // 1_000_000 + parse_duration_ms(expires_in, "--expires-in")


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
@click.option("--expires-in", default=None, help="Refused after this long (e.g. 30d).")
@json_option
@click.pass_context
def credentials_create(
    ctx: click.Context,
    role: str,
    queue_ids: tuple[str, ...],
    name: str | None,
    output: str,
    expires_in: str | None,
    as_json: bool,
) -> None:
    """Create a credential and write its credentials file; print its ID, never the secret."""
    client = settings(ctx).client(ctx)
    out = settings(ctx).output(False)
    expires = _expiry(expires_in)
    if output == "-":
        creds = client.create_credential(role, list(queue_ids), name, expires_at_ms=expires)
        out.line(creds.to_json().decode())
        return
    creds = client.create_credential(role, list(queue_ids), name, path=output,
                                     expires_at_ms=expires)
    if as_json:
        out.json({"credential_id": creds.credential_id, "role": creds.role,
                  "queues": list(creds.queues), "name": name, "file": output})
    else:
        out.line(creds.credential_id)


@credentials.command("list")
@json_option
@click.pass_context
def credentials_list(ctx: click.Context, as_json: bool) -> None:
    """Every credential: role, queues, created, last used, expiry, revoked (no secrets)."""
    s = settings(ctx)
    found = s.client(ctx).list_credentials()
    s.output(as_json).show_or_json(
        {"credentials": found}, lambda: credentials_table(found, time.time_ns() // 1_000_000))


@credentials.command("rotate")
@click.argument("credential_id")
@click.option("--grace", default="0", show_default=True,
              help="How long the old secret keeps working (e.g. 10m).")
@click.option("--expires-in", default=None, help="A new expiry from now (e.g. 30d).")
@click.option("-o", "--output", required=True,
              help="Credentials file to write with the new secret (mode 0600).")
@click.pass_context
def credentials_rotate(ctx: click.Context, credential_id: str, grace: str,
                       expires_in: str | None, output: str) -> None:
    """Give a credential a new secret; print its ID, never the secret."""
    s = settings(ctx)
    creds = s.client(ctx).rotate_credential(
        credential_id, parse_duration_ms(grace, "--grace"), path=output,
        expires_at_ms=_expiry(expires_in))
    s.output(False).line(creds.credential_id)


@credentials.command("revoke")
@click.argument("credential_id")
@json_option
@click.pass_context
def credentials_revoke(ctx: click.Context, credential_id: str, as_json: bool) -> None:
    """Revoke a credential; requests made with it are refused from now on."""
    s = settings(ctx)
    answer = s.client(ctx).revoke_credential(credential_id)
    out = s.output(as_json)
    if out.human:
        out.line(f"credential {answer.get('credential_id')} is revoked")
    else:
        out.json(answer)
