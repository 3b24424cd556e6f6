"""Leases granted with the dispatch: an attempt's unconfirmed grant.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-06

A worker that asks for the ``grant`` protocol feature receives its reservations already
started (docs/protocol.md, "Grants"). Until it renews, finishes, declines or resumes such an
attempt, ``attempts.grant_connection`` holds the ``connected_at_ms`` of the connection the
grant went to; a resume on a newer connection releases the ones it does not list. Null for
every other attempt, and for every attempt made before this revision.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("grant_connection", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("grant_connection")
