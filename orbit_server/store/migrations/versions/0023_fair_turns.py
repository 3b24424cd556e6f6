"""Fair dispatch by numbered turns, in the dispatch index: no index of its own.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-07

A fair queue's task takes a turn number when it is ready to run (``tasks.fair_turn``): its
value's last turn plus one, and never below the queue's floor (the highest turn a claim has
started), per priority rank (``fair_turns``, ``fair_floors``). ``ix_tasks_dispatch`` gains
``fair_turn`` between the rank and the ready instant: the tasks without a turn (every task
of a queue that is not fair) are the range they were, in (rank, available_at) order, and a
fair queue's numbered tasks one range in (rank, turn) order (docs/flow-control.md "Fair
dispatch"). ``ix_tasks_fair`` is dropped: a fair task has no index entry more than another,
and on MySQL/MariaDB no task pays for it; so is ``tasks.fair_value``: a task is numbered by
its keys and the queue's key name at the time. Tasks queued before this revision have no
turn: a fair claim numbers them as it finds them ready. A downgrade leaves the old column
null (its tasks then take their turns as those queued before the queue was fair).
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
_PENDING = sa.text("state = 'PENDING'")
_FAIR = sa.text("state = 'PENDING' AND fair_value IS NOT NULL")


def _dispatch_index(columns: list[str]) -> None:
    op.drop_index("ix_tasks_dispatch", table_name="tasks")
    op.create_index("ix_tasks_dispatch", "tasks", columns, sqlite_where=_PENDING)


def upgrade() -> None:
    op.drop_index("ix_tasks_fair", table_name="tasks")
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("fair_value")
        batch.add_column(sa.Column("fair_turn", sa.BigInteger(), nullable=True))
    _dispatch_index([*_CAPABILITY, "requires_key", "dispatch_rank", "fair_turn",
                     "available_at_ms"])
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
    _dispatch_index([*_CAPABILITY, "requires_key", "dispatch_rank", "available_at_ms"])
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("fair_turn")
        batch.add_column(sa.Column("fair_value", sa.String(100), nullable=True))
    op.create_index("ix_tasks_fair", "tasks",
                    [*_CAPABILITY, "fair_value", "requires_key", "dispatch_rank",
                     "available_at_ms", "deadline_at_ms"], sqlite_where=_FAIR)
