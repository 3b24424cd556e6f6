"""Task priorities: a dispatch rank on every task, and the dispatch index ordered by it.

Revision ID: 0007
Revises: 0003
Create Date: 2026-12-02

Dispatch takes the highest priority first and, within one, the oldest available task
(docs/http-api.md "TaskSpec"). The rank is MAX_PRIORITY - priority so the index is read in
ascending order on every engine; tasks submitted before this revision get the default
priority (5, rank 4).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0004"
branch_labels = None
depends_on = None

_DISPATCH_OLD = ["queue_id", "state", "handler", "handler_version", "payload_version",
                 "available_at_ms"]
_DISPATCH_NEW = ["queue_id", "state", "handler", "handler_version", "payload_version",
                 "dispatch_rank", "available_at_ms"]


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("dispatch_rank", sa.SmallInteger(), nullable=False,
                                   server_default="4"))
    with op.batch_alter_table("tasks") as batch:
        batch.alter_column("dispatch_rank", server_default=None,
                           existing_type=sa.SmallInteger(), existing_nullable=False)
        batch.drop_index("ix_tasks_dispatch")
        batch.create_index("ix_tasks_dispatch", _DISPATCH_NEW)


def downgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.drop_index("ix_tasks_dispatch")
        batch.create_index("ix_tasks_dispatch", _DISPATCH_OLD)
        batch.drop_column("dispatch_rank")
