"""``orbit-server bootstrap-admin``: migrate, then create an admin credential directly in the
database. Kept apart from ``app`` so the command loads the store and the admin use cases
only, not the HTTP stack, the dispatcher or uvicorn (it runs before many a server start)."""

from __future__ import annotations

import random
import time
from pathlib import Path

from orbit_host.credentials import Credentials, write_credentials

from .config import ServerConfig
from .services.admin import AdminService
from .services.context import TxContext
from .store.db import create_engine_for, migrate


def bootstrap_admin(config: ServerConfig, output: Path, server_url: str,
                    name: str | None) -> str:
    """Migrate, create an admin credential directly in the database, and write its
    credentials file (mode 0600). Returns the credential ID; the secret is only in the file."""
    migrate(config.db_url)
    engine = create_engine_for(config.db_url)
    try:
        admin = AdminService(TxContext(engine, config, _wall_clock_ms, random.Random()))
        made = admin.bootstrap_admin(name)
    finally:
        engine.dispose()
    write_credentials(output, Credentials(
        url=server_url.rstrip("/"), credential_id=made["credential_id"], secret=made["secret"],
        role=str(made.get("role", "admin")), queues=tuple(made.get("queues", ())),
    ))
    return str(made["credential_id"])


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000
