"""The hand-written migration matches tables.py, runs twice safely, and sets the pragmas."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.schema import CreateIndex
from support.bulk_rows import attempt_row, task_row

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
    files = {_revision_of(p) for p in (Path(migrations.__file__).parent / "versions").glob(
        "0*.py")}
    assert sorted(chain) == sorted(files)


def _revision_of(path: Path) -> str:
    """The ``revision = "..."`` a migration file assigns (its id need not be its name's)."""
    for node in ast.parse(path.read_bytes()).body:
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                and any(isinstance(t, ast.Name) and t.id == "revision" for t in node.targets)):
            return str(node.value.value)
    raise AssertionError(f"{path.name} assigns no revision")


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


def _upgraded_to(engine: Engine, url: str, revision: str, *, down: bool = False) -> None:
    """Bring the database at ``url`` to ``revision`` with Alembic (``down``: a downgrade)."""
    from alembic import command

    from orbit_server.store.db import alembic_config

    with engine.begin() as conn:
        cfg = alembic_config(url)
        cfg.attributes["connection"] = conn
        (command.downgrade if down else command.upgrade)(cfg, revision)


def test_a_database_behind_head_is_upgraded(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'orbit.db'}"
    engine = create_engine_for(url)
    try:
        _upgraded_to(engine, url, "0004")
        assert current_revision(engine) == "0004"
        migrate(url)  # the version read sees 0004, so Alembic runs the rest of the chain
        assert current_revision(engine) == head_revision()
    finally:
        engine.dispose()


def _schema_sql(engine: Engine) -> dict[str, str]:
    """Each index's and table's SQL as SQLite stores it, whitespace folded."""
    with engine.connect() as conn:
        rows = conn.exec_driver_sql("SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL "
                                    "AND name NOT LIKE 'alembic%'").all()
    return {name: " ".join(sql.replace("\"", "").split()) for name, sql in rows}


def test_the_partial_indexes_hold_the_rows_tables_py_says(tmp_path: Path) -> None:
    # compare_metadata does not read a partial index's WHERE: the migrated database's DDL
    # of every index is tables.py's, WHERE included.
    url = f"sqlite:///{tmp_path / 'orbit.db'}"
    migrate(url)
    engine = create_engine_for(url)
    try:
        found = _schema_sql(engine)
        for table in metadata.tables.values():
            for index in table.indexes:
                wanted = " ".join(str(CreateIndex(index).compile(dialect=engine.dialect)).split())
                assert found[index.name] == wanted
    finally:
        engine.dispose()


def test_an_upgrade_to_partial_indexes_keeps_every_row(tmp_path: Path) -> None:
    from orbit_server.store.rows import INSERT_ATTEMPT, INSERT_RECEIPT, INSERT_TASK

    url = f"sqlite:///{tmp_path / 'orbit.db'}"
    engine = create_engine_for(url)
    try:
        _upgraded_to(engine, url, "0009")
        with engine.begin() as conn:
            keyed = [task_row(i, state) for i, state in enumerate(("PENDING", "RUNNING",
                                                                  "SUCCEEDED"))]
            unkeyed = [{**task_row(10 + i, "PENDING"), "operation_key": None} for i in range(2)]
            INSERT_TASK.run(conn, [*keyed, *unkeyed])
            INSERT_ATTEMPT.run(conn, [attempt_row(i, state) for i, state in enumerate(
                ("RESERVED", "RUNNING", "FINISHED"))])
            # Receipts inserted out of creation order (keyed by instance and message then).
            INSERT_RECEIPT.run(conn, [
                {"instance_id": "e" * 32, "msg_id": f"m{i}", "op": "renew", "answer": "{}",
                 "created_at_ms": at} for i, at in enumerate((30, 10, 20))])
        before = _rows(engine)
        migrate(url)
        assert current_revision(engine) == head_revision()
        assert _rows(engine) == before
        with engine.connect() as conn:  # now in creation order, the order they are pruned in
            assert conn.exec_driver_sql("SELECT seq, msg_id FROM receipts ORDER BY seq"
                                        ).all() == [(1, "m1"), (2, "m2"), (3, "m0")]
        with engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), metadata) == []
            # Each index holds the rows it is searched for (entries counted by dbstat).
            entries = dict(conn.exec_driver_sql(
                "SELECT name, sum(ncell) FROM dbstat WHERE pagetype = 'leaf' GROUP BY name"
            ).all())
        assert entries["tasks"] == 5
        assert entries["ix_tasks_dispatch"] == entries["ix_tasks_state_deadline"] == 3
        assert entries["uq_tasks_queue_operation_key"] == 3  # the keyed tasks
        assert entries["attempts"] == 3
        assert entries["ix_attempts_instance_state"] == 2  # RESERVED and RUNNING
        assert entries["ix_attempts_state_lease_reserved"] == 2
        assert entries["receipts"] == entries["uq_receipts_instance_msg"] == 3
        # The unique key still refuses a second task with a queue's key.
        with pytest.raises(IntegrityError), engine.begin() as conn:
            INSERT_TASK.run(conn, [{**task_row(20, "PENDING"), "operation_key": "k1"}])
    finally:
        engine.dispose()


# The attempts' columns that later revisions added (null in every row they kept).
_ADDED_AFTER_0009 = {"attempts": ("grant_connection", "progress_fraction", "progress_json",
                                  "progress_at_ms"),
                     "tasks": ("policy_source", "run_max_attempts", "run_deadline_ms",
                               "progress_timeout_ms", "checkpoint", "requires", "requires_key",
                               "limit_keys", "workflow_id", "node_key", "parents_left",
                               "parents_json", "fair_turn")}


def _rows(engine: Engine) -> dict[str, list[tuple[object, ...]]]:
    """Every row of tasks and attempts and the receipts, in the columns that 0009 had."""
    with engine.connect() as conn:
        columns = {table: [c for c in (r[1] for r in conn.exec_driver_sql(
            f"PRAGMA table_info({table})").all()) if c not in _ADDED_AFTER_0009.get(table, ())]
            for table in ("tasks", "attempts")}
    queries = {table: f"SELECT {', '.join(names)} FROM {table} ORDER BY id"
               for table, names in columns.items()}
    queries["receipts"] = ("SELECT instance_id, msg_id, op, answer, created_at_ms FROM "
                           "receipts ORDER BY instance_id, msg_id")
    with engine.connect() as conn:
        return {table: [tuple(r) for r in conn.exec_driver_sql(sql).all()]
                for table, sql in queries.items()}


def test_receipts_move_to_insertion_order_and_back_with_their_rows(db_url: str) -> None:
    # On both stores: 0010 copies receipts into a table keyed by insertion order, oldest
    # first, and its downgrade copies them back.
    migrate(db_url)
    engine = create_engine_for(db_url)
    wanted = [("e" * 32, f"m{i}", "renew", "{}", at) for i, at in enumerate((30, 10, 20))]
    try:
        _upgraded_to(engine, db_url, "0009", down=True)
        with engine.begin() as conn:
            for row in wanted:
                conn.execute(text("INSERT INTO receipts (instance_id, msg_id, op, answer, "
                                  "created_at_ms) VALUES (:i, :m, :o, :a, :c)"),
                             dict(zip("imoac", row, strict=True)))
        migrate(db_url)
        with engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), metadata) == []
            got = conn.exec_driver_sql("SELECT instance_id, msg_id, op, answer, created_at_ms "
                                       "FROM receipts ORDER BY seq").all()
        assert [tuple(r) for r in got] == sorted(wanted, key=lambda r: r[4])
        _upgraded_to(engine, db_url, "0009", down=True)
        with engine.connect() as conn:
            back = conn.exec_driver_sql("SELECT instance_id, msg_id, op, answer, created_at_ms "
                                        "FROM receipts ORDER BY msg_id").all()
        assert [tuple(r) for r in back] == wanted
        migrate(db_url)
        assert current_revision(engine) == head_revision()
    finally:
        engine.dispose()


def test_six_field_crons_move_their_seconds_first_and_back(db_url: str) -> None:
    # On both stores: 0014 rewrites a schedule stored with seconds last (the old
    # reading of six fields) seconds-first, so it fires as before; five fields stay; the
    # downgrade puts the seconds back last.
    migrate(db_url)
    engine = create_engine_for(db_url)
    crons = {"a" * 32: "*/10 * * * * *", "b" * 32: "0 */2 * * * 30", "c" * 32: "0 9 * * 1-5"}
    try:
        _upgraded_to(engine, db_url, "0011", down=True)
        with engine.begin() as conn:
            for schedule_id, cron in crons.items():
                conn.execute(text(
                    "INSERT INTO schedules (id, queue_id, name, cron, timezone, task, "
                    "missed_ticks, state, next_fire_at_ms, fired, created_by, created_at_ms, "
                    "updated_at_ms) VALUES (:id, :q, NULL, :cron, 'UTC', '{}', 'skip', "
                    "'PAUSED', 1, 0, 'test', 1, 1)"),
                    {"id": schedule_id, "q": "d" * 32, "cron": cron})
        migrate(db_url)
        with engine.connect() as conn:
            got = dict(conn.exec_driver_sql("SELECT id, cron FROM schedules").all())
        assert got == {"a" * 32: "* */10 * * * *", "b" * 32: "30 0 */2 * * *",
                       "c" * 32: "0 9 * * 1-5"}
        _upgraded_to(engine, db_url, "0011", down=True)
        with engine.connect() as conn:
            assert dict(conn.exec_driver_sql("SELECT id, cron FROM schedules").all()) == crons
        migrate(db_url)
        assert current_revision(engine) == head_revision()
    finally:
        engine.dispose()


def test_holds_keep_their_rows_through_0021_and_back(db_url: str) -> None:
    # On both stores: 0021 keeps limit_holds' rows in the primary key alone (SQLite rebuilds
    # the table WITHOUT ROWID); its downgrade puts the rowid and the index back.
    migrate(db_url)
    engine = create_engine_for(db_url)
    rows = [("q" * 32, f"k:{i % 2}", f"{i:032x}", 1000 + i) for i in range(5)]
    select = ("SELECT queue_id, limit_key, attempt_id, reserved_at_ms FROM limit_holds"
              " ORDER BY attempt_id")
    try:
        _upgraded_to(engine, db_url, "0020", down=True)
        with engine.begin() as conn:
            for row in rows:
                conn.execute(text("INSERT INTO limit_holds VALUES (:q, :k, :a, :at)"),
                             dict(zip(("q", "k", "a", "at"), row, strict=True)))
        migrate(db_url)
        with engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), metadata) == []
            assert [tuple(r) for r in conn.exec_driver_sql(select).all()] == rows
        _upgraded_to(engine, db_url, "0020", down=True)
        with engine.connect() as conn:
            assert [tuple(r) for r in conn.exec_driver_sql(select).all()] == rows
        migrate(db_url)
        assert current_revision(engine) == head_revision()
    finally:
        engine.dispose()
