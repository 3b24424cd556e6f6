"""The operator's views and bounded storage: task finish and start-by instants, the listing,
retention and start-by indexes, and what an instance's connection offers.

Revision ID: 0005
Revises: 0007
Create Date: 2026-12-02

``tasks.finished_at_ms`` is set when a task becomes SUCCEEDED, FAILED or CANCELLED (existing
terminal tasks take their last update instant); retention deletes by it. The policy's
``schedule_to_start_ms`` and its instant ``start_by_at_ms`` end a task nobody started in
time; ``spec_digest`` lets a resubmit with the same operation key but another spec be
refused (older tasks have none and are not compared). ``ix_tasks_queue_state_created``
serves the task list's keyset pages. The instance columns hold the current connection's
replica, capabilities, slots and credit, written by the replica serving it, so every
replica lists the workers of all.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0007"
branch_labels = None
depends_on = None

_INSTANCE_COLUMNS = (
    ("replica", sa.String(128)), ("agent", sa.String(128)), ("capabilities", sa.Text()),
    ("slots", sa.Integer()), ("credit", sa.Integer()), ("connected_at_ms", sa.BigInteger()),
    ("last_heartbeat_at_ms", sa.BigInteger()), ("disconnected_at_ms", sa.BigInteger()),
)
_TASK_COLUMNS = ("finished_at_ms", "schedule_to_start_ms", "start_by_at_ms")


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        for name in _TASK_COLUMNS:
            batch.add_column(sa.Column(name, sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("spec_digest", sa.String(64), nullable=True))
    op.execute("UPDATE tasks SET finished_at_ms = updated_at_ms "
               "WHERE state IN ('SUCCEEDED', 'FAILED', 'CANCELLED')")
    op.create_index("ix_tasks_queue_state_created", "tasks",
                    ["queue_id", "state", "created_at_ms", "id"])
    op.create_index("ix_tasks_finished", "tasks", ["finished_at_ms"])
    op.create_index("ix_tasks_start_by", "tasks", ["start_by_at_ms"])
    with op.batch_alter_table("instances") as batch:
        for name, type_ in _INSTANCE_COLUMNS:
            batch.add_column(sa.Column(name, type_, nullable=True))
    op.create_index("ix_instances_seen", "instances", ["last_seen_at_ms"])


def downgrade() -> None:
    op.drop_index("ix_instances_seen", table_name="instances")
    with op.batch_alter_table("instances") as batch:
        for name, _type in _INSTANCE_COLUMNS:
            batch.drop_column(name)
    for index in ("ix_tasks_start_by", "ix_tasks_finished", "ix_tasks_queue_state_created"):
        op.drop_index(index, table_name="tasks")
    with op.batch_alter_table("tasks") as batch:
        for name in (*_TASK_COLUMNS, "spec_digest"):
            batch.drop_column(name)
