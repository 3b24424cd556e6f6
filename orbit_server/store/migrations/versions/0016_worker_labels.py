"""Workers chosen by labels: a worker instance's labels, what a task requires of them.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06

``instances.labels`` keeps the labels of an instance's hello (``orbit-supervise --label``),
JSON object text, null for none. ``tasks.requires`` keeps the label pairs a task's worker
must have, canonical ("k=v,k=v", keys sorted), and ``tasks.requires_key`` a 32-character
digest of it: null, the common case, for a task any worker of its queue may take.

``ix_tasks_dispatch`` gains ``requires_key`` after the capability, so the dispatch range of
tasks that require nothing (``requires_key IS NULL``) stays one index range in dispatch
order, and each requirement is a range of its own (the text itself could be too long for
an index entry on MySQL). Partial on SQLite as before (PENDING tasks).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

_INDEX = "ix_tasks_dispatch"
_BEFORE = ["queue_id", "state", "handler", "handler_version", "payload_version",
           "dispatch_rank", "available_at_ms"]
_AFTER = [*_BEFORE[:5], "requires_key", *_BEFORE[5:]]
_PENDING = sa.text("state = 'PENDING'")


def upgrade() -> None:
    with op.batch_alter_table("instances") as batch:
        batch.add_column(sa.Column("labels", sa.Text(), nullable=True))
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("requires", sa.Text(), nullable=True))
        batch.add_column(sa.Column("requires_key", sa.String(32), nullable=True))
    op.drop_index(_INDEX, table_name="tasks")
    op.create_index(_INDEX, "tasks", _AFTER, sqlite_where=_PENDING)


def downgrade() -> None:
    op.drop_index(_INDEX, table_name="tasks")
    op.create_index(_INDEX, "tasks", _BEFORE, sqlite_where=_PENDING)
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("requires_key")
        batch.drop_column("requires")
    with op.batch_alter_table("instances") as batch:
        batch.drop_column("labels")
