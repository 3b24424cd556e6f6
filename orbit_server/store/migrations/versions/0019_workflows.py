"""Workflows: graphs of task nodes submitted at once, released as their parents end.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-06

A workflow (docs/http-api.md "Workflows") is a ``workflows`` row; its nodes are tasks that
carry ``workflow_id`` and ``node_key``; its edges are ``workflow_edges`` rows (the child, the
parent's position among the child's parents, the parent, ``on_failure``, and ``done`` once
the parent's end was counted). ``tasks.parents_left`` counts a node's parents not done yet:
the transaction that ends a parent decrements it in one UPDATE, so two replicas ending two
parents at once serialize on the child's row and exactly one of them releases it.
``tasks.parents_json`` holds the parents' results from the release on (what the node's
reservations carry). Tasks made before this revision are plain tasks (all NULL).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

_JSON = sa.Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")
_OPTIONS: dict[str, Any] = {"mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("workflow_id", sa.String(32), nullable=True))
        batch.add_column(sa.Column("node_key", sa.String(128), nullable=True))
        batch.add_column(sa.Column("parents_left", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("parents_json", _JSON, nullable=True))
    op.create_index("ix_tasks_workflow", "tasks", ["workflow_id"],
                    sqlite_where=sa.text("workflow_id IS NOT NULL"))
    op.create_table(
        "workflows",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("queue_id", sa.String(32), nullable=False),
        sa.Column("name", sa.String(128), nullable=True),
        sa.Column("operation_key", sa.String(255), nullable=True),
        sa.Column("node_count", sa.Integer(), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("created_by", sa.String(128), nullable=True),
        sa.Column("cancelled_at_ms", sa.BigInteger(), nullable=True),
        **_OPTIONS,
    )
    op.create_index("ix_workflows_queue_created", "workflows",
                    ["queue_id", "created_at_ms", "id"])
    op.create_index("uq_workflows_queue_operation_key", "workflows",
                    ["queue_id", "operation_key"], unique=True,
                    sqlite_where=sa.text("operation_key IS NOT NULL"))
    op.create_table(
        "workflow_edges",
        sa.Column("child_task_id", sa.String(32), primary_key=True),
        sa.Column("position", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("parent_task_id", sa.String(32), nullable=False),
        sa.Column("parent_key", sa.String(128), nullable=False),
        sa.Column("child_key", sa.String(128), nullable=False),
        sa.Column("workflow_id", sa.String(32), nullable=False),
        sa.Column("on_failure", sa.String(16), nullable=False),
        sa.Column("done", sa.Boolean(), nullable=False),
        **_OPTIONS,
    )
    op.create_index("ix_workflow_edges_parent", "workflow_edges", ["parent_task_id"])
    op.create_index("ix_workflow_edges_workflow", "workflow_edges", ["workflow_id"])


def downgrade() -> None:
    op.drop_table("workflow_edges")
    op.drop_table("workflows")
    op.drop_index("ix_tasks_workflow", "tasks")
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("parents_json")
        batch.drop_column("parents_left")
        batch.drop_column("node_key")
        batch.drop_column("workflow_id")
