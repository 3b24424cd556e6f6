"""``orbit health``: does the server answer? Needs no credentials."""

from __future__ import annotations

import time

import click

from ..errors import ServerUnreachable
from .app import settings
from .output import json_option

RETRY_EVERY_S = 0.1  # --wait: how often an unreachable server is tried again


@click.command()
@click.option("--wait", "wait_s", type=click.FloatRange(min=0), default=0.0, metavar="SECONDS",
              help="Try again for up to SECONDS while the server cannot be reached (one "
                   "just started, say); exit 4 if it never answers.")
@json_option
@click.pass_context
def health(ctx: click.Context, wait_s: float, as_json: bool) -> None:
    """Check that the server answers (no credentials needed)."""
    s = settings(ctx)
    client = s.client(ctx, anonymous=True)
    out = s.output(as_json)
    deadline = time.monotonic() + wait_s
    while True:
        started = time.monotonic()
        try:
            answer = client.health()
            break
        except ServerUnreachable:
            if time.monotonic() + RETRY_EVERY_S > deadline:
                raise
            time.sleep(RETRY_EVERY_S)
    took_ms = int((time.monotonic() - started) * 1000)
    if out.human:
        out.line(f"orbit-server at {client.url} is {answer.get('status', '?')} "
                 f"(answered in {took_ms} ms)")
    else:
        out.json(answer)
