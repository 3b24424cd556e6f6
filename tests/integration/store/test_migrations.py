"""The hand-written migration matches tables.py, runs twice safely, and sets the pragmas."""

from __future__ import annotations

from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from orbit_server.store import create_engine_for, current_revision, migrate, migrations
from orbit_server.store.db import WAL_AUTOCHECKPOINT_PAGES, head_revision
from orbit_server.store.tables import metadata


def test_migration_matches_metadata_and_is_idempotent(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'deep' / 'dir' / 'orbit.db'}"
    migrate(url)
    migrate(url)  # a second run is a no-op
    engine = create_engine_for(url)
    try:
        assert current_revision(engine) == head_revision()
        with engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), metadata) == []
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 2  # FULL
            assert (conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar()
                    == WAL_AUTOCHECKPOINT_PAGES)
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
            assert (conn.exec_driver_sql("PRAGMA busy_timeout").scalar() or 0) >= 1000
    finally:
        engine.dispose()


def test_empty_database_has_no_revision(tmp_path: Path) -> None:
    engine = create_engine_for(f"sqlite:///{tmp_path / 'empty.db'}")
    try:
        assert current_revision(engine) is None
    finally:
        engine.dispose()


def test_the_migrations_form_one_chain() -> None:
    # Branches that each add a revision on the same parent give alembic two heads, and
    # `upgrade head` would refuse to run; head_revision() names them. The chain from the head
    # down must also reach every revision file.
    from alembic.script import ScriptDirectory

    from orbit_server.store.db import alembic_config

    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    chain = [rev.revision for rev in script.walk_revisions(base="base", head=head_revision())]
    files = {p.name.split("_", 1)[0]
             for p in (Path(migrations.__file__).parent / "versions").glob("0*.py")}
    assert sorted(chain) == sorted(files)
