"""Pause and resume: the paused queues, capabilities and capability versions, and the log of
every pause and resume (who and why).

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-06

A row of ``pauses`` stops new starts of the queue's matching tasks: ``handler`` "" pauses
the whole queue, ``handler_version`` "" every version of the handler. Running attempts
finish normally; the tasks stay PENDING. ``pause_log`` keeps one row per pause and resume.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

_MYSQL: dict[str, Any] = {"mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}
_AUTO_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "pauses",
        sa.Column("queue_id", sa.String(32), nullable=False),
        sa.Column("handler", sa.String(128), nullable=False),
        sa.Column("handler_version", sa.String(128), nullable=False),
        sa.Column("reason", sa.String(1024), nullable=False),
        sa.Column("paused_by", sa.String(96), nullable=False),
        sa.Column("paused_at_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("queue_id", "handler", "handler_version"),
        **_MYSQL,
    )
    op.create_table(
        "pause_log",
        sa.Column("id", _AUTO_ID, primary_key=True, autoincrement=True),
        sa.Column("queue_id", sa.String(32), nullable=False),
        sa.Column("handler", sa.String(128), nullable=False),
        sa.Column("handler_version", sa.String(128), nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("actor", sa.String(96), nullable=False),
        sa.Column("reason", sa.String(1024), nullable=True),
        sa.Column("at_ms", sa.BigInteger(), nullable=False),
        **_MYSQL,
    )
    op.create_index("ix_pause_log_queue_at", "pause_log", ["queue_id", "at_ms"])


def downgrade() -> None:
    op.drop_index("ix_pause_log_queue_at", table_name="pause_log")
    op.drop_table("pause_log")
    op.drop_table("pauses")
