"""The schema as SQLAlchemy Core metadata. Portable SQL only (SQLite and MySQL/MariaDB).

Instants are BigInteger wall-clock milliseconds; JSON travels as exact text (LONGTEXT on
MySQL, since a payload may be 256 KiB). migrations/versions/0001_initial.py creates the same
schema by hand; tests/integration/store/test_migrations.py checks they agree.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    ColumnElement,
    Float,
    Index,
    Integer,
    MetaData,
    SmallInteger,
    String,
    Table,
    Text,
    and_,
    literal_column,
    text,
)
from sqlalchemy.dialects import mysql

from orbit_wire.limits import MAX_PRIORITY, MIN_PRIORITY
from orbit_wire.model import AttemptState, TaskState

ID = 32  # orbit_wire.ids: 32 lowercase hex characters
NAME = 128  # orbit_wire.limits.MAX_NAME_LEN
CODE = 64  # orbit_wire.limits.MAX_CODE_LEN
STATE = 16
REQUIRES_KEY = 32  # orbit_wire.labels.requires_key: hex digest characters
OPERATION_KEY = 255
MSG_ID = 64
PATTERN = 100  # orbit_wire.flow: a 32-character name, ":", a 64-character value
LIMIT_KEYS = 1024  # JSON of at most 8 keys

# JSON text: TEXT on SQLite, LONGTEXT on MySQL/MariaDB (TEXT there stops at 64 KiB).
JsonText = Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")
# Backoff factors: DOUBLE on MySQL/MariaDB, whose FLOAT is single precision (0.1 != 0.1).
Ratio = Float().with_variant(mysql.DOUBLE(asdecimal=False), "mysql", "mariadb")
# MySQL/MariaDB tables compare text byte for byte: the default collations are
# case-insensitive, which would merge operation keys and capabilities that differ in case.
# (migrations/versions/0002_mysql_binary_text.py converts tables made by 0001.)
MYSQL_OPTIONS: dict[str, Any] = {"mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}
# SQLite only auto-increments an INTEGER PRIMARY KEY (the rowid alias).
AutoId = BigInteger().with_variant(Integer(), "sqlite")

# Dispatch takes higher priorities first; the index stores MAX_PRIORITY - priority (the
# "rank", 0 first) so every engine reads it in ascending order: one index range per rank,
# each already in available_at order (queries.DISPATCH_ONE).
DISPATCH_RANKS = tuple(range(MAX_PRIORITY - MIN_PRIORITY + 1))


def rank_of(priority: int) -> int:
    return MAX_PRIORITY - priority


def priority_of(rank: int) -> int:
    return MAX_PRIORITY - rank


def state_is(column: Column[Any], *states: str) -> ColumnElement[bool]:
    """``column = 'S'``, or ``column IN ('S1', 'S2')``, with the states as constants in the SQL.

    SQLite keeps only some rows in a partial index (its ``WHERE``, built here too) and uses
    it for a query only when the query's WHERE repeats that condition with the same
    constants: against a bound parameter it re-prepares the statement on every execution
    to compare the value. Every query on such an index states its rows this way."""
    values: list[ColumnElement[str]] = [literal_column(f"'{state}'") for state in states]
    return column == values[0] if len(values) == 1 else column.in_(values)


# The rows of tasks and attempts the partial indexes below hold (SQLite; MySQL and MariaDB
# have no partial indexes and keep every row): what dispatch, the deadline sweep and the
# reaper search, so a task or attempt leaves these indexes once it no longer can be found
# there instead of moving to a state nothing searches.
PENDING = TaskState.PENDING.value
OPEN_ATTEMPT = (AttemptState.RESERVED.value, AttemptState.RUNNING.value)


metadata = MetaData()

queues = Table(
    "queues",
    metadata,
    Column("id", String(ID), primary_key=True),
    Column("name", String(NAME), nullable=True),
    Column("created_at_ms", BigInteger, nullable=False),
    **MYSQL_OPTIONS,
)

credentials = Table(
    "credentials",
    metadata,
    Column("id", String(ID), primary_key=True),
    Column("secret_hash", String(64), nullable=False),
    Column("role", String(STATE), nullable=False),
    Column("queues", Text, nullable=False),  # JSON list of queue IDs
    Column("name", String(NAME), nullable=True),
    Column("created_at_ms", BigInteger, nullable=False),
    Column("revoked_at_ms", BigInteger, nullable=True),
    # migrations/versions/0006: expiry, last use, the rotated-out secret and its grace end.
    Column("expires_at_ms", BigInteger, nullable=True),
    Column("last_used_at_ms", BigInteger, nullable=True),
    Column("previous_secret_hash", String(64), nullable=True),
    Column("previous_secret_until_ms", BigInteger, nullable=True),
    **MYSQL_OPTIONS,
)

# Cancels and revocations for the replica a worker is connected to (services.pushes).
pushes = Table(
    "pushes",
    metadata,
    Column("id", AutoId, primary_key=True, autoincrement=True),
    Column("kind", String(STATE), nullable=False),
    Column("credential_id", String(ID), nullable=True),
    Column("instance_id", String(ID), nullable=True),
    Column("attempt_id", String(ID), nullable=True),
    Column("epoch", Integer, nullable=True),
    Column("created_at_ms", BigInteger, nullable=False),
    Index("ix_pushes_created", "created_at_ms"),
    **MYSQL_OPTIONS,
)

instances = Table(
    "instances",
    metadata,
    Column("id", String(ID), primary_key=True),
    Column("secret_hash", String(64), nullable=False),
    Column("credential_id", String(ID), nullable=False),
    Column("queue_id", String(ID), nullable=False),
    Column("created_at_ms", BigInteger, nullable=False),
    Column("last_seen_at_ms", BigInteger, nullable=False),
    # The instance's current (or last) connection, as its server replica records it:
    # which replica, what it offers, its credit at the replica's last presence write.
    Column("replica", String(NAME), nullable=True),
    Column("agent", String(NAME), nullable=True),
    Column("capabilities", Text, nullable=True),  # JSON list of capability objects
    Column("slots", Integer, nullable=True),
    Column("credit", Integer, nullable=True),
    Column("connected_at_ms", BigInteger, nullable=True),
    Column("last_heartbeat_at_ms", BigInteger, nullable=True),
    Column("disconnected_at_ms", BigInteger, nullable=True),
    # Its labels (orbit-supervise --label), JSON object text; null: none (migration 0016).
    Column("labels", Text, nullable=True),
    # Live instances are a range of recent last_seen_at_ms; old rows are pruned by it.
    Index("ix_instances_seen", "last_seen_at_ms"),
    **MYSQL_OPTIONS,
)

# Each queue's registered capabilities and the policy their workers declare (migration
# 0013): JSON text of orbit_wire.policy.DeclaredPolicy, "{}" when none is declared.
capability_policies = Table(
    "capability_policies",
    metadata,
    Column("queue_id", String(ID), primary_key=True),
    Column("handler", String(NAME), primary_key=True),
    Column("handler_version", String(NAME), primary_key=True),
    Column("payload_version", String(NAME), primary_key=True),
    Column("policy", Text, nullable=False),
    Column("registered_at_ms", BigInteger, nullable=False),
    # When the policy was first declared (null while none is).
    Column("declared_at_ms", BigInteger, nullable=True),
    Column("instance_id", String(ID), nullable=False),  # the first to declare (or register)
    **MYSQL_OPTIONS,
)

tasks = Table(
    "tasks",
    metadata,
    Column("id", String(ID), primary_key=True),
    Column("queue_id", String(ID), nullable=False),
    Column("state", String(STATE), nullable=False),
    Column("handler", String(NAME), nullable=False),
    Column("handler_version", String(NAME), nullable=False),
    Column("payload_version", String(NAME), nullable=False),
    Column("payload", JsonText, nullable=False),
    Column("idempotency", String(STATE), nullable=False),
    Column("max_attempts", Integer, nullable=False),
    Column("backoff_initial_ms", BigInteger, nullable=False),
    Column("backoff_max_ms", BigInteger, nullable=False),
    Column("backoff_multiplier", Ratio, nullable=False),
    Column("backoff_jitter", Ratio, nullable=False),
    Column("attempt_timeout_ms", BigInteger, nullable=False),
    Column("lease_ttl_ms", BigInteger, nullable=False),
    Column("deadline_at_ms", BigInteger, nullable=False),
    Column("operation_key", String(OPERATION_KEY), nullable=True),
    Column("created_at_ms", BigInteger, nullable=False),
    Column("updated_at_ms", BigInteger, nullable=False),
    Column("available_at_ms", BigInteger, nullable=False),
    Column("epoch", Integer, nullable=False),
    Column("attempts_started", Integer, nullable=False),
    Column("uncertain", Boolean, nullable=False),
    Column("result", JsonText, nullable=True),
    Column("failure_code", String(CODE), nullable=True),
    Column("failure_details", JsonText, nullable=True),
    Column("cancel_requested", Boolean, nullable=False),
    Column("current_attempt_id", String(ID), nullable=True),
    # When the task became SUCCEEDED, FAILED or CANCELLED (retention and listing by it).
    Column("finished_at_ms", BigInteger, nullable=True),
    # The policy's schedule_to_start_ms, and the instant it ends an unstarted task (the
    # reaper clears start_by_at_ms once the task started or ended, so its index stays small).
    Column("schedule_to_start_ms", BigInteger, nullable=True),
    Column("start_by_at_ms", BigInteger, nullable=True),
    # SHA-256 of the submitted spec: the same operation key with another spec is refused.
    Column("spec_digest", String(64), nullable=True),
    Column("dispatch_rank", SmallInteger, nullable=False),  # rank_of(priority)
    Column("cancel_grace_ms", Integer, nullable=False),  # migration 0008
    # Where the policy came from: submit, registered, default (migration 0013; null before).
    Column("policy_source", String(STATE), nullable=True),
    # The attempts and deadline span one run gets, kept from the submitted policy when a
    # review or an operator's retry first raised max_attempts (null: as submitted; 0014).
    Column("run_max_attempts", Integer, nullable=True),
    Column("run_deadline_ms", BigInteger, nullable=True),
    # The policy's progress_timeout_ms (null: no bound), and the last progress details an
    # attempt that did not succeed reported: the next attempt's checkpoint (migration 0015).
    Column("progress_timeout_ms", BigInteger, nullable=True),
    Column("checkpoint", JsonText, nullable=True),
    # The labels a worker must have, canonical "k=v,k=v", and its digest, which the
    # dispatch index holds (null, the common case: any worker; migration 0016).
    Column("requires", Text, nullable=True),
    Column("requires_key", String(REQUIRES_KEY), nullable=True),
    # The task's flow-control keys as a JSON list (null: none; migration 0017).
    Column("limit_keys", String(LIMIT_KEYS), nullable=True),
    # A workflow node (migration 0019): its workflow and key; how many of its parents are
    # not done yet (decremented atomically as they end: the release happens exactly once);
    # its parents' results, copied in when it is released (what its reservations carry).
    Column("workflow_id", String(ID), nullable=True),
    Column("node_key", String(NAME), nullable=True),
    Column("parents_left", Integer, nullable=True),
    Column("parents_json", JsonText, nullable=True),
    # Its turn among the fair values of its queue and priority (migration 0023, docs/
    # flow-control.md "Fair dispatch"): numbered when it is submitted ready to run to a fair
    # queue, or when a fair claim first finds it ready (after a delay, a retry's backoff, a
    # workflow release); null while it waits for that, and in a queue that is not fair.
    Column("fair_turn", BigInteger, nullable=True),
    # Listing a queue's tasks by state, newest or oldest first, with a keyset cursor.
    Index("ix_tasks_queue_state_created", "queue_id", "state", "created_at_ms", "id"),
    # Partial on SQLite (migration 0009): only non-null instants are ever searched.
    Index("ix_tasks_finished", "finished_at_ms",
          sqlite_where=text("finished_at_ms IS NOT NULL")),
    Index("ix_tasks_start_by", "start_by_at_ms",
          sqlite_where=text("start_by_at_ms IS NOT NULL")),
    **MYSQL_OPTIONS,
)
# Several NULL operation keys are allowed by a unique index on every supported engine; on
# SQLite the index holds only the tasks that have a key (migration 0010).
Index("uq_tasks_queue_operation_key", tasks.c.queue_id, tasks.c.operation_key, unique=True,
      sqlite_where=tasks.c.operation_key.is_not(None))
# Partial on SQLite (migration 0010): dispatch and the deadline sweep read PENDING tasks only.
# A task's fair turn (migration 0023) sits between its rank and its ready instant: the tasks
# without one (every task of a queue that is not fair) are one range per rank in
# (rank, available_at) order; a fair queue's numbered tasks one range in (rank, turn) order.
Index("ix_tasks_dispatch", tasks.c.queue_id, tasks.c.state, tasks.c.handler,
      tasks.c.handler_version, tasks.c.payload_version, tasks.c.requires_key,
      tasks.c.dispatch_rank, tasks.c.fair_turn,
      tasks.c.available_at_ms, sqlite_where=state_is(tasks.c.state, PENDING))
Index("ix_tasks_state_deadline", tasks.c.state, tasks.c.deadline_at_ms,
      sqlite_where=state_is(tasks.c.state, PENDING))

# A workflow's nodes (partial on SQLite: plain tasks are not in it).
Index("ix_tasks_workflow", tasks.c.workflow_id, sqlite_where=tasks.c.workflow_id.is_not(None))

# Workflows (migration 0019): the graph's own row; its nodes are tasks, its edges below.
workflows = Table(
    "workflows",
    metadata,
    Column("id", String(ID), primary_key=True),
    Column("queue_id", String(ID), nullable=False),
    Column("name", String(NAME), nullable=True),
    Column("operation_key", String(OPERATION_KEY), nullable=True),
    Column("node_count", Integer, nullable=False),
    Column("created_at_ms", BigInteger, nullable=False),
    Column("created_by", String(NAME), nullable=True),
    Column("cancelled_at_ms", BigInteger, nullable=True),
    Index("ix_workflows_queue_created", "queue_id", "created_at_ms", "id"),
    **MYSQL_OPTIONS,
)
Index("uq_workflows_queue_operation_key", workflows.c.queue_id, workflows.c.operation_key,
      unique=True, sqlite_where=workflows.c.operation_key.is_not(None))

# One row per edge: the child, its parent's position among its parents (declared order),
# the parent, what its failure does to the child, and whether the parent's end was counted.
workflow_edges = Table(
    "workflow_edges",
    metadata,
    Column("child_task_id", String(ID), primary_key=True),
    Column("position", Integer, primary_key=True, autoincrement=False),
    Column("parent_task_id", String(ID), nullable=False),
    Column("parent_key", String(NAME), nullable=False),
    Column("child_key", String(NAME), nullable=False),
    Column("workflow_id", String(ID), nullable=False),
    Column("on_failure", String(STATE), nullable=False),
    Column("done", Boolean, nullable=False),
    Index("ix_workflow_edges_parent", "parent_task_id"),
    Index("ix_workflow_edges_workflow", "workflow_id"),
    **MYSQL_OPTIONS,
)

attempts = Table(
    "attempts",
    metadata,
    Column("id", String(ID), primary_key=True),
    Column("task_id", String(ID), nullable=False),
    Column("queue_id", String(ID), nullable=False),
    Column("epoch", Integer, nullable=False),
    Column("attempt_number", Integer, nullable=False),
    Column("state", String(STATE), nullable=False),
    Column("instance_id", String(ID), nullable=False),
    Column("child_pid", Integer, nullable=True),
    Column("reserved_at_ms", BigInteger, nullable=False),
    Column("started_at_ms", BigInteger, nullable=True),
    Column("finished_at_ms", BigInteger, nullable=True),
    Column("lease_expires_at_ms", BigInteger, nullable=True),
    Column("attempt_deadline_at_ms", BigInteger, nullable=True),
    Column("renewals", Integer, nullable=False),
    Column("outcome", String(STATE), nullable=True),
    Column("code", String(CODE), nullable=True),
    Column("retryable", Boolean, nullable=True),
    Column("details", JsonText, nullable=True),
    Column("exit_code", Integer, nullable=True),
    Column("signal", Integer, nullable=True),
    Column("cpu_ms", BigInteger, nullable=True),
    Column("peak_rss_bytes", BigInteger, nullable=True),
    Column("kill_reason", String(CODE), nullable=True),
    Column("decision", String(STATE), nullable=True),
    Column("decision_rule", String(CODE), nullable=True),
    Column("killed_at_ms", BigInteger, nullable=True),  # migration 0004
    Column("reap_ms", Integer, nullable=True),
    # After a cancel reached the running attempt: COOPERATIVE or KILLED (migration 0008).
    Column("ended_by", String(16), nullable=True),
    # An unconfirmed lease granted with the dispatch: its connection (migration 0011).
    Column("grant_connection", BigInteger, nullable=True),
    # The handler's latest progress, from a renew or the finish (migration 0015): the
    # fraction done, its details (JSON text) and when the server received them.
    Column("progress_fraction", Ratio, nullable=True),
    Column("progress_json", JsonText, nullable=True),
    Column("progress_at_ms", BigInteger, nullable=True),
    Index("ix_attempts_task", "task_id"),
    **MYSQL_OPTIONS,
)
# The reaper's two searches share one index (migration 0010): RUNNING attempts by lease
# expiry, RESERVED ones (whose lease is NULL until they start) by reservation instant, so a
# start moves an entry within one tree. Partial on SQLite, as is the instance's: both are
# searched for open attempts only.
Index("ix_attempts_state_lease_reserved", attempts.c.state, attempts.c.lease_expires_at_ms,
      attempts.c.reserved_at_ms, sqlite_where=state_is(attempts.c.state, *OPEN_ATTEMPT))
Index("ix_attempts_instance_state", attempts.c.instance_id, attempts.c.state,
      sqlite_where=state_is(attempts.c.state, *OPEN_ATTEMPT))


def open_attempt(state: AttemptState | None = None) -> ColumnElement[bool]:
    """The open (RESERVED or RUNNING) attempts, or those in ``state`` among them, as a
    query of the partial indexes of attempts states them (``state_is``)."""
    is_open = state_is(attempts.c.state, *OPEN_ATTEMPT)
    return is_open if state is None else and_(is_open, state_is(attempts.c.state, state.value))

evidence = Table(
    "evidence",
    metadata,
    Column("id", String(ID), primary_key=True),
    Column("task_id", String(ID), nullable=False),
    Column("attempt_id", String(ID), nullable=False),
    Column("epoch", Integer, nullable=False),
    Column("instance_id", String(ID), nullable=False),
    Column("received_at_ms", BigInteger, nullable=False),
    Column("outcome", String(STATE), nullable=False),
    Column("code", String(CODE), nullable=True),
    Column("reason", String(CODE), nullable=False),
    Column("result", JsonText, nullable=True),
    Column("details", JsonText, nullable=True),
    Index("ix_evidence_task", "task_id"),
    **MYSQL_OPTIONS,
)

receipts = Table(
    "receipts",
    metadata,
    # Insertion order (migration 0010): receipts older than the retention are pruned oldest
    # first along this key (services.reaper.Reaper.prune_receipts), which every insert
    # appends to (on SQLite the rowid), instead of along an index of the creation instant.
    Column("seq", AutoId, primary_key=True, autoincrement=True),
    Column("instance_id", String(ID), nullable=False),
    Column("msg_id", String(MSG_ID), nullable=False),
    Column("op", String(STATE), nullable=False),
    Column("answer", Text, nullable=False),
    Column("created_at_ms", BigInteger, nullable=False),
    Index("uq_receipts_instance_msg", "instance_id", "msg_id", unique=True),
    **MYSQL_OPTIONS,
)

audit = Table(
    "audit",
    metadata,
    Column("id", AutoId, primary_key=True, autoincrement=True),
    Column("task_id", String(ID), nullable=False),
    Column("attempt_id", String(ID), nullable=True),
    Column("at_ms", BigInteger, nullable=False),
    Column("actor", String(CODE + ID), nullable=False),
    Column("kind", String(CODE), nullable=False),
    Column("from_state", String(STATE), nullable=True),
    Column("to_state", String(STATE), nullable=True),
    Column("detail", Text, nullable=True),
    Index("ix_audit_task_at", "task_id", "at_ms"),
    **MYSQL_OPTIONS,
)

# Periodic schedules (docs/http-api.md "Schedules"): the cron, its zone and the task spec
# each firing submits. The firing loop reads due ACTIVE rows by next_fire_at_ms.
schedules = Table(
    "schedules",
    metadata,
    Column("id", String(ID), primary_key=True),
    Column("queue_id", String(ID), nullable=False),
    Column("name", String(NAME), nullable=True),
    Column("cron", String(128), nullable=False),
    Column("timezone", String(64), nullable=False),
    Column("task", JsonText, nullable=False),  # the TaskSpec as given
    Column("missed_ticks", String(STATE), nullable=False),
    Column("state", String(STATE), nullable=False),
    Column("next_fire_at_ms", BigInteger, nullable=False),
    Column("last_tick_at_ms", BigInteger, nullable=True),
    Column("last_task_id", String(ID), nullable=True),
    Column("fired", BigInteger, nullable=False),
    Column("created_by", String(CODE + ID), nullable=False),
    Column("created_at_ms", BigInteger, nullable=False),
    Column("updated_at_ms", BigInteger, nullable=False),
    Index("ix_schedules_due", "state", "next_fire_at_ms"),
    Index("ix_schedules_queue", "queue_id"),
    **MYSQL_OPTIONS,
)

# One row per fired (or passed-over) tick: the primary key is what makes a tick fire once.
schedule_firings = Table(
    "schedule_firings",
    metadata,
    Column("schedule_id", String(ID), primary_key=True),
    Column("tick_at_ms", BigInteger, primary_key=True, autoincrement=False),
    Column("task_id", String(ID), nullable=True),  # None: a missed tick passed over
    Column("fired_at_ms", BigInteger, nullable=False),
    Column("missed", Boolean, nullable=False),  # earlier due ticks were passed over
    **MYSQL_OPTIONS,
)

# Paused dispatch (migration 0018, docs/flow-control.md "Pause and resume"): a queue
# (handler ""), a capability (handler_version "") or a capability version starts no new
# attempts while its row exists. Every server keeps the rows in memory (services.pauses).
pauses = Table(
    "pauses",
    metadata,
    Column("queue_id", String(ID), primary_key=True),
    Column("handler", String(NAME), primary_key=True),
    Column("handler_version", String(NAME), primary_key=True),
    Column("reason", String(1024), nullable=False),
    Column("paused_by", String(CODE + ID), nullable=False),
    Column("paused_at_ms", BigInteger, nullable=False),
    **MYSQL_OPTIONS,
)

# Every pause and resume, who and why (the pauses' audit).
pause_log = Table(
    "pause_log",
    metadata,
    Column("id", AutoId, primary_key=True, autoincrement=True),
    Column("queue_id", String(ID), nullable=False),
    Column("handler", String(NAME), nullable=False),
    Column("handler_version", String(NAME), nullable=False),
    Column("action", String(STATE), nullable=False),  # "paused" or "resumed"
    Column("actor", String(CODE + ID), nullable=False),
    Column("reason", String(1024), nullable=True),
    Column("at_ms", BigInteger, nullable=False),
    Index("ix_pause_log_queue_at", "queue_id", "at_ms"),
    **MYSQL_OPTIONS,
)

# Flow-control limits of a queue (docs/flow-control.md, migration 0017): a key or "name:*"
# and its bounds. Dispatch locks the rows that match its tasks' keys (FOR UPDATE on MySQL)
# before counting, so two replicas never both take the last slot.
queue_limits = Table(
    "queue_limits",
    metadata,
    Column("queue_id", String(ID), primary_key=True),
    Column("pattern", String(PATTERN), primary_key=True),
    Column("max_running", Integer, nullable=True),
    Column("rate_count", Integer, nullable=True),
    Column("rate_interval_ms", BigInteger, nullable=True),
    Column("created_at_ms", BigInteger, nullable=False),
    Column("updated_at_ms", BigInteger, nullable=False),
    Column("updated_by", String(CODE + ID), nullable=False),
    **MYSQL_OPTIONS,
)

# One row per (key, attempt) started under a limit: its open attempts are the key's running
# count, its rows within the rate interval its recent starts. Rows of ended attempts past
# every interval are pruned by the dispatch that holds the key's limit. Every read is a key's
# range, so the primary key is the only B-tree (WITHOUT ROWID on SQLite; migration 0021).
limit_holds = Table(
    "limit_holds",
    metadata,
    Column("queue_id", String(ID), primary_key=True),
    Column("limit_key", String(PATTERN), primary_key=True),
    Column("attempt_id", String(ID), primary_key=True),
    Column("reserved_at_ms", BigInteger, nullable=False),
    sqlite_with_rowid=False,
    **MYSQL_OPTIONS,
)

# Who changed a queue's limits, when and how (set or delete, with the bounds set).
limit_changes = Table(
    "limit_changes",
    metadata,
    Column("id", AutoId, primary_key=True, autoincrement=True),
    Column("queue_id", String(ID), nullable=False),
    Column("pattern", String(PATTERN), nullable=False),
    Column("at_ms", BigInteger, nullable=False),
    Column("actor", String(CODE + ID), nullable=False),
    Column("action", String(STATE), nullable=False),
    Column("detail", Text, nullable=True),
    Index("ix_limit_changes_queue_at", "queue_id", "at_ms"),
    **MYSQL_OPTIONS,
)

# A queue's fair dispatch (migration 0020, docs/flow-control.md "Fair dispatch"): its
# dispatch takes turns between the values of the key named here. Changes are logged in
# limit_changes (pattern: the key name, action "fair_on" or "fair_off").
queue_fairness = Table(
    "queue_fairness",
    metadata,
    Column("queue_id", String(ID), primary_key=True),
    Column("key_name", String(32), nullable=False),
    Column("updated_at_ms", BigInteger, nullable=False),
    Column("updated_by", String(CODE + ID), nullable=False),
    **MYSQL_OPTIONS,
)
# Where a fair queue's turns stand (migration 0023, docs/flow-control.md "Fair dispatch"),
# per priority rank: the last turn given to each value, and the highest turn a claim has
# started (the floor: a value that comes back, or a new one, takes its next turn after it).
fair_turns = Table(
    "fair_turns",
    metadata,
    Column("queue_id", String(ID), primary_key=True),
    Column("dispatch_rank", Integer, primary_key=True, autoincrement=False),
    Column("fair_value", String(PATTERN), primary_key=True),
    Column("last_turn", BigInteger, nullable=False),
    sqlite_with_rowid=False,
    **MYSQL_OPTIONS,
)
fair_floors = Table(
    "fair_floors",
    metadata,
    Column("queue_id", String(ID), primary_key=True),
    Column("dispatch_rank", Integer, primary_key=True, autoincrement=False),
    Column("turn", BigInteger, nullable=False),
    sqlite_with_rowid=False,
    **MYSQL_OPTIONS,
)
