"""Producer channel frames (docs/producers.md, docs/http-api.md "Producer channel"): frozen
msgspec Structs, one JSON text message each, tagged by ``type``.

A producer opens a WebSocket at ``/v1/producer`` with the same bearer as HTTP and may keep
several submits in flight: each ``submit`` is answered by ``submitted`` (or an ``error``
with its ``id``) once its transaction is committed, in any order. Tasks it submits (with
``watch``) and tasks it names in ``watch`` are pushed to it, once each, as ``ended`` when
they settle (terminal or NEEDS_REVIEW; at once for one settled already). Task specs and
views travel as the JSON objects the HTTP API takes and answers (``msgspec.Raw`` on the way
out, plain values once decoded), so the two stay one contract.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

import msgspec
from msgspec import Meta, Struct

from .frames import decode_checked
from .limits import MAX_SUBMIT_BATCH
from .names import Id

__all__ = [
    "MAX_WATCH", "ClientMessage", "Ended", "Failure", "ProducerError", "ServerMessage",
    "Submit", "Submitted", "Watch", "Watching", "decode_client_message",
    "decode_server_message", "encode_message",
]

MAX_WATCH = 1000  # task IDs one ``watch`` names
RequestId = Annotated[int, Meta(ge=0, le=2**53)]


class _Message(Struct, frozen=True, tag_field="type", omit_defaults=True):
    type: ClassVar[str]


# --------------------------------------------------------------------------- producer → server


class Submit(_Message, frozen=True, tag="submit"):
    """Tasks for ``queue_id`` (each a TaskSpec object, as ``POST .../tasks`` takes), created
    in one transaction; ``watch``: push each one's ``ended`` when it settles."""

    id: RequestId
    queue_id: Id
    tasks: Annotated[tuple[Any, ...], Meta(min_length=1, max_length=MAX_SUBMIT_BATCH)]
    watch: bool = True


class Watch(_Message, frozen=True, tag="watch"):
    """Push ``ended`` for each of these tasks when it settles (at once if it has)."""

    id: RequestId
    task_ids: Annotated[tuple[Id, ...], Meta(min_length=1, max_length=MAX_WATCH)]


ClientMessage = Submit | Watch


# --------------------------------------------------------------------------- server → producer


class Submitted(_Message, frozen=True, tag="submitted"):
    """The submit ``id`` is committed: the task views, in the order of its specs."""

    id: RequestId
    tasks: tuple[Any, ...]


class Watching(_Message, frozen=True, tag="watching"):
    """The watch ``id`` is registered; ``unknown`` tasks do not exist for this credential
    (no ``ended`` will come for them)."""

    id: RequestId
    unknown: tuple[str, ...] = ()


class Ended(_Message, frozen=True, tag="ended"):
    """A watched task settled: its view (as ``GET /v1/tasks/{id}`` answers it)."""

    task: Any


class Failure(Struct, frozen=True, omit_defaults=True):
    code: str
    message: str
    retryable: bool = False


class ProducerError(_Message, frozen=True, tag="error"):
    """The request ``id`` failed (nothing of it was applied, or, for a retryable code, it
    may have been: resend it unchanged); without an ``id`` the connection fails and is
    closed after this frame."""

    error: Failure
    id: RequestId | None = None


ServerMessage = Submitted | Watching | Ended | ProducerError

for _kind in (Submit, Watch, Submitted, Watching, Ended, ProducerError):
    _kind.type = str(_kind.__struct_config__.tag)

_ENCODER = msgspec.json.Encoder()
_CLIENT: msgspec.json.Decoder[ClientMessage] = msgspec.json.Decoder(ClientMessage)
_SERVER: msgspec.json.Decoder[ServerMessage] = msgspec.json.Decoder(ServerMessage)


def encode_message(message: ClientMessage | ServerMessage) -> bytes:
    """One message as JSON; a task spec or view may be ``msgspec.Raw`` (written as it is)."""
    return _ENCODER.encode(message)


def decode_client_message(data: bytes | str) -> ClientMessage:
    """A producer's message; ProtocolError (BAD_FRAME, FRAME_TOO_LARGE,
    UNKNOWN_FRAME_TYPE, LIMIT_EXCEEDED) on anything else."""
    return decode_checked(_CLIENT, ClientMessage, data, "message")


def decode_server_message(data: bytes | str) -> ServerMessage:
    """A server's message, of any size (the answer to a batch of 1000 tasks with their
    payloads may be larger than what a producer may send)."""
    return decode_checked(_SERVER, ServerMessage, data, "message", limit=None)
