"""Periodic schedules and their firings.

Revision ID: 0007b
Revises: 0005
Create Date: 2026-12-02

A schedule holds a cron expression, its time zone and the task spec each firing submits;
``schedule_firings`` has one row per tick fired, keyed by (schedule, tick), so a tick fires
once however many replicas look at it (docs/http-api.md "Schedules").
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0007b"
down_revision = "0005"
branch_labels = None
depends_on = None

_JSON = sa.Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")
_OPTIONS: dict[str, Any] = {"mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}


def upgrade() -> None:
    op.create_table(
        "schedules",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("queue_id", sa.String(32), nullable=False),
        sa.Column("name", sa.String(128), nullable=True),
        sa.Column("cron", sa.String(128), nullable=False),
        sa.Column("timezone", sa.String(64), nullable=False),
        sa.Column("task", _JSON, nullable=False),
        sa.Column("missed_ticks", sa.String(16), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("next_fire_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("last_tick_at_ms", sa.BigInteger(), nullable=True),
        sa.Column("last_task_id", sa.String(32), nullable=True),
        sa.Column("fired", sa.BigInteger(), nullable=False),
        sa.Column("created_by", sa.String(96), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("updated_at_ms", sa.BigInteger(), nullable=False),
        **_OPTIONS,
    )
    op.create_index("ix_schedules_due", "schedules", ["state", "next_fire_at_ms"])
    op.create_index("ix_schedules_queue", "schedules", ["queue_id"])
    op.create_table(
        "schedule_firings",
        sa.Column("schedule_id", sa.String(32), primary_key=True),
        sa.Column("tick_at_ms", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("task_id", sa.String(32), nullable=True),
        sa.Column("fired_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("missed", sa.Boolean(), nullable=False),
        **_OPTIONS,
    )


def downgrade() -> None:
    op.drop_table("schedule_firings")
    op.drop_index("ix_schedules_queue", table_name="schedules")
    op.drop_index("ix_schedules_due", table_name="schedules")
    op.drop_table("schedules")
