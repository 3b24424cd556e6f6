"""Alembic environment: runs on the connection ``migrate()`` passes in, or opens its own."""

from __future__ import annotations

from alembic import context

from orbit_server.store.db import create_engine_for
from orbit_server.store.tables import metadata

config = context.config


def _run(connection: object) -> None:
    context.configure(connection=connection, target_metadata=metadata)  # type: ignore[arg-type]
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    context.configure(
        url=config.get_main_option("sqlalchemy.url"), target_metadata=metadata, literal_binds=True
    )
    with context.begin_transaction():
        context.run_migrations()
else:
    given = config.attributes.get("connection")
    if given is not None:
        _run(given)
    else:
        url = config.get_main_option("sqlalchemy.url")
        assert url, "sqlalchemy.url is not set"
        engine = create_engine_for(url)
        try:
            with engine.begin() as conn:
                _run(conn)
        finally:
            engine.dispose()
