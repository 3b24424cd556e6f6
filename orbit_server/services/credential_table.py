"""Credential rows held in memory, so that authenticating a request and fencing a worker's
request on its credential read no row (docs/security.md, "Revocation").

An entry is the credential's row as last read. It is dropped, and read again at the next use,
when the credential changes: on this server by the revoke or rotate that changed it (on the
store thread, before any later transaction runs), on another replica when its ``pushes`` row
is read (``forget``, within a push poll). An entry is also read again once it is older than
``config.auth_cache_ms``, a bound for a push that was missed, and every entry is dropped when
a group commit rolls back (a row read inside it may show a change that never committed).
Unknown credential IDs are not kept: a peer cannot fill the table. Used on the store thread
only.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from ..store.credentials import credential_row

# Entries kept at most; past it the table starts over rather than tracking age.
MAX_ENTRIES = 10_000


class CredentialTable:
    """Credential rows by ID, each with the instant it was read (wall-clock ms)."""

    def __init__(self, max_age_ms: int) -> None:
        self._max_age_ms = max_age_ms
        self._rows: dict[str, tuple[dict[str, Any], int]] = {}

    def row(self, conn: Connection, credential_id: str, now_ms: int) -> dict[str, Any] | None:
        """The credential's row, from memory while its entry is fresh, else read on
        ``conn`` (and kept); None when there is no such credential."""
        kept = self.kept(credential_id, now_ms)
        return kept if kept is not None else self.read(conn, credential_id, now_ms)

    def kept(self, credential_id: str, now_ms: int) -> dict[str, Any] | None:
        """The credential's row while its entry is fresh, else None (no statement)."""
        kept = self._rows.get(credential_id)
        if kept is not None and now_ms - kept[1] < self._max_age_ms:
            return kept[0]
        return None

    def read(self, conn: Connection, credential_id: str, now_ms: int) -> dict[str, Any] | None:
        """The credential's row read on ``conn`` now (a hello reads it so), and kept."""
        row = credential_row(conn, credential_id)
        if row is None:
            self._rows.pop(credential_id, None)
            return None
        if len(self._rows) >= MAX_ENTRIES:
            self._rows.clear()
        self._rows[credential_id] = (row, now_ms)
        return row

    def used(self, credential_id: str, now_ms: int) -> None:
        """The credential's last use was written (its kept row says so too)."""
        kept = self._rows.get(credential_id)
        if kept is not None:
            kept[0]["last_used_at_ms"] = now_ms

    def forget(self, credential_id: str) -> None:
        """Drop the credential's entry: it changed (or may have)."""
        self._rows.pop(credential_id, None)

    def clear(self) -> None:
        self._rows.clear()

    def __len__(self) -> int:
        return len(self._rows)
