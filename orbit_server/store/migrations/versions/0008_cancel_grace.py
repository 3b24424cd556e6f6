"""Cooperative cancel: a task's cancel grace, and how a cancelled attempt's child ended.

Revision ID: 0008
Revises: 0006
Create Date: 2026-12-02

A cancel of a running attempt first asks its handler to stop and SIGKILLs the child after
``tasks.cancel_grace_ms`` (docs/http-api.md "TaskSpec"); ``attempts.ended_by`` records
which one ended it (``COOPERATIVE`` or ``KILLED``), null when no cancel reached the child.
Tasks submitted before this revision get the default grace (2000 ms).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("cancel_grace_ms", sa.Integer(), nullable=False,
                                   server_default="2000"))
    with op.batch_alter_table("tasks") as batch:
        batch.alter_column("cancel_grace_ms", server_default=None,
                           existing_type=sa.Integer(), existing_nullable=False)
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("ended_by", sa.String(16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("ended_by")
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("cancel_grace_ms")
