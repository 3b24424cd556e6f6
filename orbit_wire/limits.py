"""Size, nesting and number limits shared by every party (docs/handlers.md "Results")."""

from __future__ import annotations

MAX_VALUE_BYTES = 256 * 1024  # payload, result, details: encoded JSON text
# A handler's progress details (and so the checkpoint the next attempt gets): encoded JSON.
MAX_PROGRESS_BYTES = 64 * 1024
MAX_VALUE_DEPTH = 32  # nesting of a value; a frame adds at most 4 levels around it
MAX_FRAME_DEPTH = MAX_VALUE_DEPTH + 4
# A frame may carry a result as a JSON string (escaping can grow it) plus a report.
MAX_FRAME_BYTES = 2 * 1024 * 1024
MAX_BATCH_OPS = 256  # operations in one control request
MAX_RESERVATIONS_PER_FRAME = 256
# Frames stay well below MAX_FRAME_BYTES whatever the values in them: the reservations one
# frame carries (a reserve frame, a claim's answer) hold at most this many payload bytes, and
# a request's ops at most this many bytes of results and details (as JSON strings, escaped) -
# always at least one reservation or op, which a single value's limit keeps small enough.
MAX_PAYLOAD_BYTES_PER_FRAME = MAX_FRAME_BYTES // 2
MAX_OUTPUT_BYTES_PER_REQUEST = MAX_FRAME_BYTES // 2
MAX_CAPABILITIES = 32
MAX_CAPACITY = 256
MAX_NAME_LEN = 128  # handler names and versions
MAX_MESSAGE_ID_LEN = 64
MAX_CODE_LEN = 64
MAX_SUBMIT_BATCH = 1000
# A kill report's kill_age_ms and reap_ms: a day, beyond any lease and any resend a
# receipt still answers.
MAX_KILL_AGE_MS = 86_400_000
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
PROTOCOL_VERSION = 1
# Protocol features a worker may ask for in ``hello`` (``welcome`` lists those granted).
FEATURE_GRANT = "grant"  # reservations arrive started, with a lease (docs/protocol.md)
MAX_FEATURES = 16
# A worker's labels (``orbit-supervise --label k=v``) and what a task requires of them.
MAX_LABELS = 16
MAX_LABEL_LEN = 64
# Task priorities (docs/http-api.md "TaskSpec"): higher is dispatched first within a queue.
MIN_PRIORITY = 0
MAX_PRIORITY = 9
DEFAULT_PRIORITY = 5
# How far ahead a task may be delayed (delay_ms, not_before_at_ms): 31 days.
MAX_DELAY_MS = 31 * 86_400_000
# A task's cancel grace (docs/http-api.md "TaskSpec"): how long a cancelled attempt's handler
# may take to stop by itself before its child is SIGKILLed (0: kill at once).
MIN_CANCEL_GRACE_MS = 0
MAX_CANCEL_GRACE_MS = 60_000
DEFAULT_CANCEL_GRACE_MS = 2_000
# Workflows (docs/http-api.md "Workflows"): nodes submitted at once, a node key's length,
# and the total JSON size of the parents' results a node's handler receives.
MAX_WORKFLOW_NODES = 10_000
MAX_NODE_KEY_LEN = 128
MAX_PARENTS_BYTES = 1024 * 1024
