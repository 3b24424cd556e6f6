"""What the blocking and the asyncio channel drivers share about a connection: where it
goes (``/v1/producer`` beside the HTTP API, ``wss://`` for ``https://``), how it opens (the
client's bearer in the upgrade's Authorization header, the client's TLS trust), what a
failed opening means, and the operation keys every submit over the channel carries.

A failed opening is one of three things (``opening_failure``):

- ``ChannelRefused``: the server answered the upgrade with an HTTP status (an older server
  without the channel answers 403 or 404): the call goes over HTTP instead, and so does
  every later one when the status says the channel is not offered (``for_good``);
- ``CertificateError``: the server's certificate was refused; nothing was sent, never tried
  again;
- ``ServerUnreachable``: no answer (refused connection, timeout, reset): tried again, a few
  times with pauses, before the pending calls fail with it, as an HTTP call would.
"""

from __future__ import annotations

import logging
import random
import secrets
import ssl
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from websockets.exceptions import InvalidHandshake, InvalidMessage, InvalidStatus

from orbit_wire.errors import ErrorCode

from .channel_core import ChannelCore
from .errors import OrbitApiError, certificate_refused, unreachable
from .transport import refused_certificate

__all__ = ["CLOSE_TIMEOUT_S", "ChannelBase", "ChannelRefused", "closed_error", "connect_options",
           "keyed_specs", "new_operation_key", "opening_failure", "producer_url"]

PRODUCER_PATH = "/v1/producer"
CLOSE_TIMEOUT_S = 1.0  # a closing handshake waits this long for the server's close frame
# Statuses that say this server does not offer the channel to this client: HTTP serves
# every later call too. Others (429, 5xx) may pass: the next call tries the channel again.
_REFUSED_FOR_GOOD = frozenset({400, 401, 403, 404, 405, 426, 501})
_KEY_PREFIX = "orbit-"

# websockets logs the upgrade's headers at DEBUG, the bearer among them: its logger for the
# channel never goes below INFO, whatever the root level is.
_WS_LOG = logging.getLogger("orbit.client.websocket")
_WS_LOG.setLevel(logging.INFO)


class ChannelRefused(OrbitApiError):
    """The server refused the channel (``status``: its answer to the upgrade, None when it
    did not speak WebSocket); nothing was sent on it. ``for_good``: the client uses HTTP
    from now on. The client handles it itself (the call goes over HTTP); it never reaches
    the caller."""

    def __init__(self, status: int | None, for_good: bool) -> None:
        super().__init__(ErrorCode.UNAVAILABLE, f"the producer channel was refused (HTTP "
                         f"{status})", status=status, retryable=not for_good)
        self.for_good = for_good


class ChannelBase:
    """What both drivers hold: the channel's URL, how to open it, how long a submit waits
    for its answer, and the core."""

    def __init__(self, base_url: str, headers: Mapping[str, str], tls: ssl.SSLContext | None,
                 timeout: float) -> None:
        self.url = producer_url(base_url)
        self._options = connect_options(headers, tls, timeout)
        self._timeout = timeout
        self._core = ChannelCore(random.random)


def producer_url(base_url: str) -> str:
    """``http://host:port[/prefix]`` → ``ws://host:port[/prefix]/v1/producer``."""
    parts = urlsplit(base_url)
    scheme = "wss" if parts.scheme == "https" else "ws"
    return urlunsplit((scheme, parts.netloc, parts.path.rstrip("/") + PRODUCER_PATH, "", ""))


def connect_options(headers: Mapping[str, str], tls: ssl.SSLContext | None,
                    timeout: float) -> dict[str, Any]:
    """The keyword arguments of ``websockets`` ``connect`` (sync and asyncio alike); ``tls``
    for a ``wss://`` URL (the client's ``verify``/``ca_file`` trust)."""
    options: dict[str, Any] = {
        "additional_headers": {"Authorization": headers["Authorization"]},
        "open_timeout": timeout, "close_timeout": CLOSE_TIMEOUT_S,
        # The server's answers are bounded by its own limits (a batch's views); frames are
        # small JSON, not worth compressing.
        "max_size": None, "compression": None, "logger": _WS_LOG,
    }
    if tls is not None:
        options["ssl"] = tls
    return options


def opening_failure(url: str, exc: BaseException) -> Exception:
    """What the exception of a failed opening means (the module docstring)."""
    if isinstance(exc, InvalidStatus):
        status = exc.response.status_code
        return ChannelRefused(status, status in _REFUSED_FOR_GOOD)
    if isinstance(exc, InvalidHandshake) and not isinstance(exc, InvalidMessage):
        return ChannelRefused(None, True)  # an answer, but not a WebSocket upgrade
    refused = refused_certificate(exc)
    if refused is not None:
        return certificate_refused(url, refused)
    return unreachable(url, type(exc).__name__)


def closed_error() -> OrbitApiError:
    return OrbitApiError("UNAVAILABLE", "the client was closed while this call waited",
                         retryable=False)


def new_operation_key() -> str:
    """A key no other submit uses (within the TaskSpec rule: 1-255 printable ASCII)."""
    return _KEY_PREFIX + secrets.token_hex(16)


def keyed_specs(specs: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The specs, each with an operation key: its own, else a new one (a resend after a
    reconnect then answers the same task)."""
    return [spec if not isinstance(spec, Mapping) or "operation_key" in spec
            else {**spec, "operation_key": new_operation_key()} for spec in specs]
