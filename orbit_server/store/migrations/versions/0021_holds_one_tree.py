"""Flow-control holds in one B-tree: ``limit_holds`` keyed by (queue, key, attempt) only.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-06

Every read of the holds is a key's range (its usage, its pruning), which the primary key
serves; ``ix_limit_holds_key_at`` is dropped. On SQLite the table is rebuilt WITHOUT ROWID,
so the primary key is the table itself: a hold written at a start and deleted by a later
claim changes one B-tree instead of three (docs/flow-control.md "Costs"). MySQL/MariaDB
cluster by the primary key already.
"""

from __future__ import annotations

from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

_COLUMNS = "queue_id, limit_key, attempt_id, reserved_at_ms"


def _rebuild(rowid: bool) -> None:
    """SQLite: the table again, with or without a rowid, its rows kept."""
    tail = "" if rowid else " WITHOUT ROWID"
    op.execute(
        "CREATE TABLE limit_holds_new (queue_id VARCHAR(32) NOT NULL,"
        " limit_key VARCHAR(100) NOT NULL, attempt_id VARCHAR(32) NOT NULL,"
        " reserved_at_ms BIGINT NOT NULL,"
        f" PRIMARY KEY (queue_id, limit_key, attempt_id)){tail}")
    op.execute(f"INSERT INTO limit_holds_new ({_COLUMNS}) SELECT {_COLUMNS} FROM limit_holds")
    op.execute("DROP TABLE limit_holds")
    op.execute("ALTER TABLE limit_holds_new RENAME TO limit_holds")


def upgrade() -> None:
    op.drop_index("ix_limit_holds_key_at", table_name="limit_holds")
    if op.get_bind().dialect.name == "sqlite":
        _rebuild(rowid=False)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        _rebuild(rowid=True)
    op.create_index("ix_limit_holds_key_at", "limit_holds",
                    ["queue_id", "limit_key", "reserved_at_ms"])
