"""Credentials get a lifecycle (expiry, last use, a rotated secret's grace period), and a
``pushes`` table carries cancels and revocations to the replica a worker is connected to.

Revision ID: 0006
Revises: 0007b
Create Date: 2026-12-02

`previous_secret_hash` is the secret a rotation replaced, accepted until
`previous_secret_until_ms`. A `pushes` row is written in the transaction of a cancel or a
revocation; every replica reads the recent rows (by `created_at_ms`) and acts on its own
connections; rows are deleted once older than any reader can need.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0007b"
branch_labels = None
depends_on = None

MYSQL_OPTIONS: dict[str, Any] = {"mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}


def upgrade() -> None:
    with op.batch_alter_table("credentials") as batch:
        batch.add_column(sa.Column("expires_at_ms", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("last_used_at_ms", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("previous_secret_hash", sa.String(64), nullable=True))
        batch.add_column(sa.Column("previous_secret_until_ms", sa.BigInteger(), nullable=True))
    auto_id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    op.create_table(
        "pushes",
        sa.Column("id", auto_id, primary_key=True, autoincrement=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("credential_id", sa.String(32), nullable=True),
        sa.Column("instance_id", sa.String(32), nullable=True),
        sa.Column("attempt_id", sa.String(32), nullable=True),
        sa.Column("epoch", sa.Integer(), nullable=True),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        **MYSQL_OPTIONS,
    )
    op.create_index("ix_pushes_created", "pushes", ["created_at_ms"])


def downgrade() -> None:
    op.drop_index("ix_pushes_created", table_name="pushes")
    op.drop_table("pushes")
    with op.batch_alter_table("credentials") as batch:
        batch.drop_column("previous_secret_until_ms")
        batch.drop_column("previous_secret_hash")
        batch.drop_column("last_used_at_ms")
        batch.drop_column("expires_at_ms")
