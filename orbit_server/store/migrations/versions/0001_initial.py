"""Initial schema: queues, credentials, instances, tasks, attempts, evidence, receipts, audit.

Revision ID: 0001
Revises:
Create Date: 2026-11-30

Hand-written to match orbit_server/store/tables.py; a test compares the two.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

JSON_TEXT = sa.Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")
AUTO_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "queues",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("name", sa.String(128), nullable=True),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
    )
    op.create_table(
        "credentials",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("secret_hash", sa.String(64), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("queues", sa.Text(), nullable=False),
        sa.Column("name", sa.String(128), nullable=True),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("revoked_at_ms", sa.BigInteger(), nullable=True),
    )
    op.create_table(
        "instances",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("secret_hash", sa.String(64), nullable=False),
        sa.Column("credential_id", sa.String(32), nullable=False),
        sa.Column("queue_id", sa.String(32), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("last_seen_at_ms", sa.BigInteger(), nullable=False),
    )
    op.create_table(
        "tasks",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("queue_id", sa.String(32), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("handler", sa.String(128), nullable=False),
        sa.Column("handler_version", sa.String(128), nullable=False),
        sa.Column("payload_version", sa.String(128), nullable=False),
        sa.Column("payload", JSON_TEXT, nullable=False),
        sa.Column("idempotency", sa.String(16), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("backoff_initial_ms", sa.BigInteger(), nullable=False),
        sa.Column("backoff_max_ms", sa.BigInteger(), nullable=False),
        sa.Column("backoff_multiplier", sa.Float(), nullable=False),
        sa.Column("backoff_jitter", sa.Float(), nullable=False),
        sa.Column("attempt_timeout_ms", sa.BigInteger(), nullable=False),
        sa.Column("lease_ttl_ms", sa.BigInteger(), nullable=False),
        sa.Column("deadline_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("operation_key", sa.String(255), nullable=True),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("updated_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("available_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("attempts_started", sa.Integer(), nullable=False),
        sa.Column("uncertain", sa.Boolean(), nullable=False),
        sa.Column("result", JSON_TEXT, nullable=True),
        sa.Column("failure_code", sa.String(64), nullable=True),
        sa.Column("failure_details", JSON_TEXT, nullable=True),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.Column("current_attempt_id", sa.String(32), nullable=True),
        sa.UniqueConstraint("queue_id", "operation_key", name="uq_tasks_queue_operation_key"),
    )
    op.create_index(
        "ix_tasks_dispatch",
        "tasks",
        ["queue_id", "state", "handler", "handler_version", "payload_version", "available_at_ms"],
    )
    op.create_index("ix_tasks_state_deadline", "tasks", ["state", "deadline_at_ms"])
    op.create_table(
        "attempts",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("task_id", sa.String(32), nullable=False),
        sa.Column("queue_id", sa.String(32), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("attempt_number", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("instance_id", sa.String(32), nullable=False),
        sa.Column("child_pid", sa.Integer(), nullable=True),
        sa.Column("reserved_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("started_at_ms", sa.BigInteger(), nullable=True),
        sa.Column("finished_at_ms", sa.BigInteger(), nullable=True),
        sa.Column("lease_expires_at_ms", sa.BigInteger(), nullable=True),
        sa.Column("attempt_deadline_at_ms", sa.BigInteger(), nullable=True),
        sa.Column("renewals", sa.Integer(), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=True),
        sa.Column("code", sa.String(64), nullable=True),
        sa.Column("retryable", sa.Boolean(), nullable=True),
        sa.Column("details", JSON_TEXT, nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("signal", sa.Integer(), nullable=True),
        sa.Column("cpu_ms", sa.BigInteger(), nullable=True),
        sa.Column("peak_rss_bytes", sa.BigInteger(), nullable=True),
        sa.Column("kill_reason", sa.String(64), nullable=True),
        sa.Column("decision", sa.String(16), nullable=True),
        sa.Column("decision_rule", sa.String(64), nullable=True),
    )
    op.create_index("ix_attempts_task", "attempts", ["task_id"])
    op.create_index("ix_attempts_state_lease", "attempts", ["state", "lease_expires_at_ms"])
    op.create_index("ix_attempts_state_reserved", "attempts", ["state", "reserved_at_ms"])
    op.create_index("ix_attempts_instance_state", "attempts", ["instance_id", "state"])
    op.create_table(
        "evidence",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("task_id", sa.String(32), nullable=False),
        sa.Column("attempt_id", sa.String(32), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("instance_id", sa.String(32), nullable=False),
        sa.Column("received_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("code", sa.String(64), nullable=True),
        sa.Column("reason", sa.String(64), nullable=False),
        sa.Column("result", JSON_TEXT, nullable=True),
        sa.Column("details", JSON_TEXT, nullable=True),
    )
    op.create_index("ix_evidence_task", "evidence", ["task_id"])
    op.create_table(
        "receipts",
        sa.Column("instance_id", sa.String(32), primary_key=True),
        sa.Column("msg_id", sa.String(64), primary_key=True),
        sa.Column("op", sa.String(16), nullable=False),
        sa.Column("answer", sa.Text(), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
    )
    op.create_table(
        "audit",
        sa.Column("id", AUTO_ID, primary_key=True, autoincrement=True),
        sa.Column("task_id", sa.String(32), nullable=False),
        sa.Column("attempt_id", sa.String(32), nullable=True),
        sa.Column("at_ms", sa.BigInteger(), nullable=False),
        sa.Column("actor", sa.String(96), nullable=False),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("from_state", sa.String(16), nullable=True),
        sa.Column("to_state", sa.String(16), nullable=True),
        sa.Column("detail", sa.Text(), nullable=True),
    )
    op.create_index("ix_audit_task_at", "audit", ["task_id", "at_ms"])


def downgrade() -> None:
    for table in ("audit", "receipts", "evidence", "attempts", "tasks", "instances",
                  "credentials", "queues"):
        op.drop_table(table)
