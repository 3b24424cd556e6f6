"""Flow-control limits by key: a task's keys, a queue's limits, the holds that count them.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-06

``tasks.limit_keys`` is the task's keys as a JSON list (null: none). ``queue_limits`` holds
a queue's limits by pattern (a key, or ``name:*`` for each key of the name), with the last
change's author and instant; ``limit_changes`` every change. ``limit_holds`` has a row per
(key, attempt) started under a limit: the key's running count is its rows whose attempt is
open, its recent starts its rows within the rate interval (docs/flow-control.md).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

_MYSQL: dict[str, Any] = {"mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}
_AUTO_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("limit_keys", sa.String(1024), nullable=True))
    op.create_table(
        "queue_limits",
        sa.Column("queue_id", sa.String(32), primary_key=True),
        sa.Column("pattern", sa.String(100), primary_key=True),
        sa.Column("max_running", sa.Integer(), nullable=True),
        sa.Column("rate_count", sa.Integer(), nullable=True),
        sa.Column("rate_interval_ms", sa.BigInteger(), nullable=True),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("updated_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("updated_by", sa.String(96), nullable=False),
        **_MYSQL,
    )
    op.create_table(
        "limit_holds",
        sa.Column("queue_id", sa.String(32), primary_key=True),
        sa.Column("limit_key", sa.String(100), primary_key=True),
        sa.Column("attempt_id", sa.String(32), primary_key=True),
        sa.Column("reserved_at_ms", sa.BigInteger(), nullable=False),
        **_MYSQL,
    )
    op.create_index("ix_limit_holds_key_at", "limit_holds",
                    ["queue_id", "limit_key", "reserved_at_ms"])
    op.create_table(
        "limit_changes",
        sa.Column("id", _AUTO_ID, primary_key=True, autoincrement=True),
        sa.Column("queue_id", sa.String(32), nullable=False),
        sa.Column("pattern", sa.String(100), nullable=False),
        sa.Column("at_ms", sa.BigInteger(), nullable=False),
        sa.Column("actor", sa.String(96), nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("detail", sa.Text(), nullable=True),
        **_MYSQL,
    )
    op.create_index("ix_limit_changes_queue_at", "limit_changes", ["queue_id", "at_ms"])


def downgrade() -> None:
    op.drop_index("ix_limit_changes_queue_at", table_name="limit_changes")
    op.drop_table("limit_changes")
    op.drop_index("ix_limit_holds_key_at", table_name="limit_holds")
    op.drop_table("limit_holds")
    op.drop_table("queue_limits")
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("limit_keys")
