"""Fewer B-trees written per commit: partial indexes on SQLite, one index for the reaper's
two attempt searches, receipts keyed by insertion order.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-06

Every index entry a commit adds, removes or moves is a B-tree page written to the WAL.

SQLite: a full index keeps an entry for every task or attempt, so each change of state
moved an entry in every index whose key holds the state, although each is searched for one
or two states only. These become partial indexes (``WHERE`` those rows; queries state them
with constants, ``tables.state_is``); MySQL and MariaDB have no partial indexes:

- ``ix_tasks_dispatch`` and ``ix_tasks_state_deadline``: PENDING tasks (dispatch, the
  deadline sweep);
- ``ix_attempts_instance_state``: an instance's open (RESERVED or RUNNING) attempts;
- ``uq_tasks_queue_operation_key``: the tasks that carry an operation key. It was a table
  constraint, which SQLite cannot drop, so ``tasks`` is copied into a table without it.

Every store:

- ``ix_attempts_state_lease`` (RUNNING attempts by lease expiry) and
  ``ix_attempts_state_reserved`` (RESERVED ones by reservation instant) become one index,
  ``ix_attempts_state_lease_reserved`` (state, lease_expires_at_ms, reserved_at_ms): a
  RESERVED attempt has no lease yet, so its entries are (RESERVED, NULL, reserved_at_ms),
  and a start moves an entry within one tree instead of between two. Partial on SQLite
  (open attempts).
- ``receipts`` is keyed by ``seq``, its insertion order (SQLite's rowid, an AUTO_INCREMENT
  key on MySQL), with a unique index on (instance_id, msg_id), and is pruned along that
  key: every insert appends to the table's tree, and ``ix_receipts_created``, the third
  tree each op wrote, is gone. The rows are copied in creation order.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

_PENDING = "state = 'PENDING'"
_OPEN_ATTEMPT = "state IN ('RESERVED', 'RUNNING')"
# SQLite: (index, table, columns, the rows the partial index keeps)
_PARTIAL = (
    ("ix_tasks_dispatch", "tasks",
     ["queue_id", "state", "handler", "handler_version", "payload_version", "dispatch_rank",
      "available_at_ms"], _PENDING),
    ("ix_tasks_state_deadline", "tasks", ["state", "deadline_at_ms"], _PENDING),
    ("ix_attempts_instance_state", "attempts", ["instance_id", "state"], _OPEN_ATTEMPT),
)
_OPERATION_KEY = ("uq_tasks_queue_operation_key", ["queue_id", "operation_key"])
_REAPER_INDEXES = {"ix_attempts_state_lease": ["state", "lease_expires_at_ms"],
                   "ix_attempts_state_reserved": ["state", "reserved_at_ms"]}
_REAPER_INDEX = ("ix_attempts_state_lease_reserved",
                 ["state", "lease_expires_at_ms", "reserved_at_ms"])
_MYSQL: dict[str, Any] = {"mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}
_RECEIPT_COLUMNS = "instance_id, msg_id, op, answer, created_at_ms"


def _sqlite() -> bool:
    return op.get_bind().dialect.name == "sqlite"


def upgrade() -> None:
    _copy_receipts(keyed_by_seq=True)
    for index in _REAPER_INDEXES:
        op.drop_index(index, table_name="attempts")
    name, columns = _REAPER_INDEX
    op.create_index(name, "attempts", columns, sqlite_where=sa.text(_OPEN_ATTEMPT))
    if not _sqlite():
        return
    name, columns = _OPERATION_KEY
    # The copy keeps every column, row and other index of tasks (batch mode reflects them).
    with op.batch_alter_table("tasks", recreate="always") as batch:
        batch.drop_constraint(name, type_="unique")
    op.create_index(name, "tasks", columns, unique=True,
                    sqlite_where=sa.text("operation_key IS NOT NULL"))
    for index, table, cols, where in _PARTIAL:
        op.drop_index(index, table_name=table)
        op.create_index(index, table, cols, sqlite_where=sa.text(where))


def downgrade() -> None:
    _copy_receipts(keyed_by_seq=False)
    op.drop_index(_REAPER_INDEX[0], table_name="attempts")
    for index, cols in _REAPER_INDEXES.items():
        op.create_index(index, "attempts", cols)
    if not _sqlite():
        return
    for index, table, cols, _where in _PARTIAL:
        op.drop_index(index, table_name=table)
        op.create_index(index, table, cols)
    name, columns = _OPERATION_KEY
    op.drop_index(name, table_name="tasks")
    with op.batch_alter_table("tasks", recreate="always") as batch:
        batch.create_unique_constraint(name, columns)


def _copy_receipts(keyed_by_seq: bool) -> None:
    """Copy ``receipts`` into a table keyed by insertion order (or back), oldest first."""
    key = ([sa.Column("seq", sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
                      primary_key=True, autoincrement=True)] if keyed_by_seq else [])
    op.create_table(
        "receipts_0010", *key,
        sa.Column("instance_id", sa.String(32), nullable=False, primary_key=not keyed_by_seq),
        sa.Column("msg_id", sa.String(64), nullable=False, primary_key=not keyed_by_seq),
        sa.Column("op", sa.String(16), nullable=False),
        sa.Column("answer", sa.Text(), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        **_MYSQL,
    )
    op.execute(f"INSERT INTO receipts_0010 ({_RECEIPT_COLUMNS}) SELECT {_RECEIPT_COLUMNS} "
               "FROM receipts ORDER BY created_at_ms")
    op.drop_table("receipts")
    op.rename_table("receipts_0010", "receipts")
    if keyed_by_seq:
        op.create_index("uq_receipts_instance_msg", "receipts", ["instance_id", "msg_id"],
                        unique=True)
    else:
        op.create_index("ix_receipts_created", "receipts", ["created_at_ms"])
