"""A capability's versions found from what its queue has registered (``GET
/v1/queues/{queue_id}/capabilities``), for commands given a handler name alone
(``orbit tasks submit --handler text.normalize``). Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from orbit_wire.errors import ErrorCode

from .errors import OrbitApiError

__all__ = ["choose_versions"]


def choose_versions(registered: Mapping[str, Any], handler: str,
                    handler_version: str | None, payload_version: str | None
                    ) -> tuple[str, str]:
    """(handler_version, payload_version) of the one registered capability of ``handler``
    that matches the versions given (None: any). OrbitApiError NOT_FOUND when none does,
    BAD_REQUEST listing the choices when several do."""
    pairs = sorted({(c["handler_version"], c["payload_version"])
                    for c in (entry.get("capability") or {}
                              for entry in registered.get("capabilities") or ())
                    if c.get("handler") == handler
                    and handler_version in (None, c.get("handler_version"))
                    and payload_version in (None, c.get("payload_version"))})
    queue = registered.get("queue_id", "the queue")
    if len(pairs) == 1:
        return pairs[0]
    if not pairs:
        raise OrbitApiError(ErrorCode.NOT_FOUND, (
            f"no worker has registered handler {handler!r}"
            + _versions(handler_version, payload_version) + f" in queue {queue}; "
            "give --handler-version and --payload-version, or start its worker first"))
    choices = ", ".join(f"--handler-version {v} --payload-version {p}" for v, p in pairs)
    raise OrbitApiError(ErrorCode.BAD_REQUEST, (
        f"handler {handler!r} has {len(pairs)} registered versions in queue {queue}; "
        f"choose one: {choices}"))


def _versions(handler_version: str | None, payload_version: str | None) -> str:
    given = [f"{name} {value}" for name, value in (("handler_version", handler_version),
                                                   ("payload_version", payload_version))
             if value is not None]
    return f" with {' and '.join(given)}" if given else ""
