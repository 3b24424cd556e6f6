"""The hand-written migration matches tables.py, runs twice safely, and sets the pragmas."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from orbit_server.store import create_engine_for, current_revision, migrate, migrations
from orbit_server.store.db import WAL_AUTOCHECKPOINT_PAGES, head_revision, shipped_head
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


def test_the_head_read_from_the_files_is_alembics() -> None:
    # migrate() skips Alembic for a database at shipped_head(); it must be Alembic's head.
    assert shipped_head() == head_revision()


def test_a_database_at_head_is_checked_without_loading_alembic(tmp_path: Path) -> None:
    # Loading Alembic is a good part of a server start; at head one version read decides.
    url = f"sqlite:///{tmp_path / 'orbit.db'}"
    migrate(url)
    code = ("import sys; from orbit_server.store.db import migrate; "
            f"migrate({url!r}); print(sorted(m for m in ('alembic', 'mako') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.strip() == "[]"


def test_a_database_behind_head_is_upgraded(tmp_path: Path) -> None:
    from alembic import command

    from orbit_server.store.db import alembic_config

    url = f"sqlite:///{tmp_path / 'orbit.db'}"
    engine = create_engine_for(url)
    try:
        with engine.begin() as conn:
            cfg = alembic_config(url)
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "0004")
        assert current_revision(engine) == "0004"
        migrate(url)  # the version read sees 0004, so Alembic runs the rest of the chain
        assert current_revision(engine) == head_revision()
    finally:
        engine.dispose()
