"""Attempts keep a kill's timing: when the SIGKILL went out and how long its reap took.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02

`killed_at_ms` is the server's estimate of the kill instant (the report's receipt less the
`kill_age_ms` the worker measured), so `killed_at_ms - lease_expires_at_ms` says whether the
kill came before the lease ended; `reap_ms` is the worker's measure of SIGKILL to reap.
Both stay null for attempts that were not killed and for rows written before this.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("killed_at_ms", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("reap_ms", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("reap_ms")
        batch.drop_column("killed_at_ms")
