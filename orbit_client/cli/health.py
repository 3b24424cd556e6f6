"""``orbit health``: does the server answer? Needs no credentials."""

from __future__ import annotations

import time

import click

from .app import settings
from .output import json_option


@click.command()
@json_option
@click.pass_context
def health(ctx: click.Context, as_json: bool) -> None:
    """Check that the server answers (no credentials needed)."""
    s = settings(ctx)
    client = s.client(ctx, anonymous=True)
    out = s.output(as_json)
    started = time.monotonic()
    answer = client.health()
    took_ms = int((time.monotonic() - started) * 1000)
    if out.human:
        out.line(f"orbit-server at {client.url} is {answer.get('status', '?')} "
                 f"(answered in {took_ms} ms)")
    else:
        out.json(answer)
