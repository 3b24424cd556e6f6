"""SQLite: the retention and start-by indexes hold only the tasks they find.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02

``ix_tasks_finished`` and ``ix_tasks_start_by`` are searched only for non-null instants
(retention and listing by finish time; the reaper's start-by pass), yet a full index keeps
an entry for every task, null or not, which each submit pays for. On SQLite they become
partial indexes (``WHERE ... IS NOT NULL``); MySQL and MariaDB have no partial indexes and
keep theirs.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

_COLUMNS = {"ix_tasks_finished": "finished_at_ms", "ix_tasks_start_by": "start_by_at_ms"}


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    for name, column in _COLUMNS.items():
        op.drop_index(name, table_name="tasks")
        op.create_index(name, "tasks", [column], sqlite_where=sa.text(f"{column} IS NOT NULL"))


def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    for name, column in _COLUMNS.items():
        op.drop_index(name, table_name="tasks")
        op.create_index(name, "tasks", [column])
