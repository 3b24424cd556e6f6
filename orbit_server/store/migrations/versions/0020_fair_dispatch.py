"""Fair dispatch between keys: each queue's fair key name, and each task's value for it.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-06

``queue_fairness`` holds a queue's fair key name (``customer``): its dispatch takes turns
between the values of that key (docs/flow-control.md "Fair dispatch"). ``tasks.fair_value``
is the task's key of that name (``customer:42``), "" for a task without one, written at
submit while the queue is fair (null otherwise). ``ix_tasks_fair`` reads one range per value;
on SQLite it holds only PENDING tasks that have a fair value, so other queues pay nothing.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

_MYSQL: dict[str, Any] = {"mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("fair_value", sa.String(100), nullable=True))
    op.create_index(
        "ix_tasks_fair", "tasks",
        ["queue_id", "state", "handler", "handler_version", "payload_version", "fair_value",
         "requires_key", "dispatch_rank", "available_at_ms"],
        sqlite_where=sa.text("state = 'PENDING' AND fair_value IS NOT NULL"))
    op.create_table(
        "queue_fairness",
        sa.Column("queue_id", sa.String(32), primary_key=True),
        sa.Column("key_name", sa.String(32), nullable=False),
        sa.Column("updated_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("updated_by", sa.String(96), nullable=False),
        **_MYSQL,
    )


def downgrade() -> None:
    op.drop_table("queue_fairness")
    op.drop_index("ix_tasks_fair", table_name="tasks")
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("fair_value")
