"""MySQL/MariaDB: binary (case- and accent-sensitive) text, DOUBLE backoff factors.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30

Tables made by 0001 on MySQL/MariaDB took the database's default collation, which is
case-insensitive there (operation keys "A" and "a" would collide, a capability would match
another case), and FLOAT columns, which are single precision. This revision converts them in
place; on SQLite it changes nothing (text compares by bytes, REAL is double already).
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

TABLES = ("queues", "credentials", "instances", "tasks", "attempts", "evidence", "receipts",
          "audit")


def _is_mysql() -> bool:
    return op.get_bind().dialect.name in ("mysql", "mariadb")


def upgrade() -> None:
    if not _is_mysql():
        return
    for table in TABLES:
        op.execute(f"ALTER TABLE {table} CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
    op.execute("ALTER TABLE tasks MODIFY backoff_multiplier DOUBLE NOT NULL, "
               "MODIFY backoff_jitter DOUBLE NOT NULL")


def downgrade() -> None:
    # The old collation and FLOAT lose information; a downgrade keeps the safer columns.
    pass
