"""A handler's progress on its attempt, the checkpoint kept on the task, and the policy's
progress timeout.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-06

A renew or finish may carry the handler's progress (docs/protocol.md "Progress"): the
attempt keeps the latest as ``progress_fraction``, ``progress_json`` (JSON text) and
``progress_at_ms``. When an attempt that reported details ends without succeeding, those
details are copied to ``tasks.checkpoint``, which the next reservation of the task hands to
its handler (read with the dispatch row: no extra query). ``tasks.progress_timeout_ms`` is
the policy field (null: no bound); tasks submitted before this revision have none.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

_JSON = sa.Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")
_RATIO = sa.Float().with_variant(mysql.DOUBLE(asdecimal=False), "mysql", "mariadb")


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("progress_timeout_ms", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("checkpoint", _JSON, nullable=True))
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("progress_fraction", _RATIO, nullable=True))
        batch.add_column(sa.Column("progress_json", _JSON, nullable=True))
        batch.add_column(sa.Column("progress_at_ms", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("progress_at_ms")
        batch.drop_column("progress_json")
        batch.drop_column("progress_fraction")
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("checkpoint")
        batch.drop_column("progress_timeout_ms")
