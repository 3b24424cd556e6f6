"""``orbit credentials``: create and revoke credentials (admin). Further credential commands
join this group."""

from __future__ import annotations

import click

from .app import settings
from .output import json_option


@click.group()
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
@json_option
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
    client = settings(ctx).client(ctx)
    out = settings(ctx).output(False)
    if output == "-":
        creds = client.create_credential(role, list(queue_ids), name)
        out.line(creds.to_json().decode())
        return
    creds = client.create_credential(role, list(queue_ids), name, path=output)
    if as_json:
        out.json({"credential_id": creds.credential_id, "role": creds.role,
                  "queues": list(creds.queues), "name": name, "file": output})
    else:
        out.line(creds.credential_id)


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
