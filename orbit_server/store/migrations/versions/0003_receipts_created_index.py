"""Receipts by age: the index the receipt pruner's range delete uses.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01

Receipts are kept for the retention (`--receipt-retention-hours`, default 24) and then deleted
oldest first; without this index every prune pass would scan the table.
"""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_receipts_created", "receipts", ["created_at_ms"])


def downgrade() -> None:
    op.drop_index("ix_receipts_created", table_name="receipts")
