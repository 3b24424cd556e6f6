"""Declared policies: each queue's registered capabilities, and where a task's policy came
from.

Revision ID: 0013
Revises: 0011
Create Date: 2026-12-06

A worker's hello registers every capability it serves in ``capability_policies``, with the
policy its TaskType declares (JSON text of orbit_wire.policy.DeclaredPolicy, ``{}`` when it
declares none). The first declaration of a (queue, capability) stands; a different one is
refused (POLICY_CONFLICT). A submit that leaves a policy field out gets the registered value;
``tasks.policy_source`` says where the task's policy came from (submit, registered, default;
null for the tasks made before this revision).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0011"
branch_labels = None
depends_on = None

_MYSQL: dict[str, Any] = {"mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}


def upgrade() -> None:
    op.create_table(
        "capability_policies",
        sa.Column("queue_id", sa.String(32), nullable=False),
        sa.Column("handler", sa.String(128), nullable=False),
        sa.Column("handler_version", sa.String(128), nullable=False),
        sa.Column("payload_version", sa.String(128), nullable=False),
        sa.Column("policy", sa.Text(), nullable=False),
        sa.Column("registered_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("declared_at_ms", sa.BigInteger(), nullable=True),
        sa.Column("instance_id", sa.String(32), nullable=False),
        sa.PrimaryKeyConstraint("queue_id", "handler", "handler_version", "payload_version"),
        **_MYSQL,
    )
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("policy_source", sa.String(16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("policy_source")
    op.drop_table("capability_policies")
