"""Operator retries of ended tasks, and cron expressions with seconds first.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-06

A FAILED or CANCELLED task may be run again (``POST /v1/tasks/{id}/retry``): a new *run*
with the attempts and the time its policy gave it when submitted. ``tasks.max_attempts``
counts attempts over the task's whole life (raised by each retry), so the first review or
retry that moves it keeps the submitted budget in ``tasks.run_max_attempts`` and the
submitted deadline span (deadline less submit instant) in ``tasks.run_deadline_ms``. Both
stay null until then: null means "as ``max_attempts`` and ``deadline_at_ms`` say".

A schedule's seconds field now comes first, as in Quartz, and only when the schedule asked
for seconds. Until this revision a six-field expression had its seconds last: each such
row's last field moves to the front, so it fires exactly as before.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context, op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

_SCHEDULES = sa.table("schedules", sa.column("id", sa.String(32)),
                      sa.column("cron", sa.String(128)))


def _rotate_six_field_crons(seconds_first: bool) -> None:
    if context.is_offline_mode():
        # An offline SQL script reads no rows: it says what to do instead.
        op.execute("-- rewrite each schedules.cron of 6 fields with its last field first "
                   "(seconds now come first)" if seconds_first else
                   "-- rewrite each schedules.cron of 6 fields with its first field last")
        return
    conn = op.get_bind()
    for schedule_id, cron in conn.execute(sa.select(_SCHEDULES.c.id, _SCHEDULES.c.cron)).all():
        fields = cron.split()
        if len(fields) != 6:
            continue
        moved = [fields[-1], *fields[:-1]] if seconds_first else [*fields[1:], fields[0]]
        conn.execute(_SCHEDULES.update().where(_SCHEDULES.c.id == schedule_id)
                     .values(cron=" ".join(moved)))


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("run_max_attempts", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("run_deadline_ms", sa.BigInteger(), nullable=True))
    _rotate_six_field_crons(seconds_first=True)


def downgrade() -> None:
    _rotate_six_field_crons(seconds_first=False)
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("run_deadline_ms")
        batch.drop_column("run_max_attempts")
