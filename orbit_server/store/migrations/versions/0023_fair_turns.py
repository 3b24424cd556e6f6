"""Fair dispatch by numbered turns: one range per claim instead of one per fair value.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-07

A fair queue's task takes a turn number when it is ready to run (``tasks.fair_turn``): its
value's last turn plus one, and never below the queue's floor (the highest turn a claim has
started), per priority rank (``fair_turns``, ``fair_floors``). ``ix_tasks_fair`` orders the
fair tasks by (rank, turn), so a fair claim reads one range, and the tasks without a turn
yet by (rank, available_at) (docs/flow-control.md "Fair dispatch"). Tasks queued before this
revision have no turn: a fair claim numbers them as it finds them ready.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

_MYSQL: dict[str, Any] = {"mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}
_CAPABILITY = ["queue_id", "state", "handler", "handler_version", "payload_version"]
_PARTIAL = sa.text("state = 'PENDING' AND fair_value IS NOT NULL")


def upgrade() -> None:
    op.drop_index("ix_tasks_fair", table_name="tasks")
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("fair_turn", sa.BigInteger(), nullable=True))
    op.create_index("ix_tasks_fair", "tasks",
                    [*_CAPABILITY, "requires_key", "dispatch_rank", "fair_turn",
                     "available_at_ms", "deadline_at_ms"], sqlite_where=_PARTIAL)
    op.create_table(
        "fair_turns",
        sa.Column("queue_id", sa.String(32), primary_key=True),
        sa.Column("dispatch_rank", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("fair_value", sa.String(100), primary_key=True),
        sa.Column("last_turn", sa.BigInteger(), nullable=False),
        sqlite_with_rowid=False,
        **_MYSQL,
    )
    op.create_table(
        "fair_floors",
        sa.Column("queue_id", sa.String(32), primary_key=True),
        sa.Column("dispatch_rank", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("turn", sa.BigInteger(), nullable=False),
        sqlite_with_rowid=False,
        **_MYSQL,
    )


def downgrade() -> None:
    op.drop_table("fair_floors")
    op.drop_table("fair_turns")
    op.drop_index("ix_tasks_fair", table_name="tasks")
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("fair_turn")
    op.create_index("ix_tasks_fair", "tasks",
                    [*_CAPABILITY, "fair_value", "requires_key", "dispatch_rank",
                     "available_at_ms", "deadline_at_ms"], sqlite_where=_PARTIAL)
