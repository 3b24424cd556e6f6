"""The fair index carries each task's deadline: a fair range is read from the index alone.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-06

A fair claim reads each value's first rows in dispatch order that are within their deadline
(docs/flow-control.md "Fair dispatch"). With ``deadline_at_ms`` the last column of
``ix_tasks_fair``, SQLite finds those rows from the index without reading each task's row
for its deadline first (the claim then reads only the rows it returns).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

_COLUMNS = ["queue_id", "state", "handler", "handler_version", "payload_version", "fair_value",
            "requires_key", "dispatch_rank", "available_at_ms"]


def _fair_index(columns: list[str]) -> None:
    op.drop_index("ix_tasks_fair", table_name="tasks")
    op.create_index("ix_tasks_fair", "tasks", columns,
                    sqlite_where=sa.text("state = 'PENDING' AND fair_value IS NOT NULL"))


def upgrade() -> None:
    _fair_index([*_COLUMNS, "deadline_at_ms"])


def downgrade() -> None:
    _fair_index(_COLUMNS)
