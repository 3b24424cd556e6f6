"""The task list's rules (docs/http-api.md "Listing tasks"): its filters, the opaque keyset
cursor, and how a page is cut from the rows scanned in index order. Pure.

A page walks ``ix_tasks_queue_state_created`` (queue, state, created_at_ms, id): one ordered
range per wanted state, merged. Filters that index does not serve (capability, finish time)
are applied to the rows scanned, and a page scans at most ``SCAN_BUDGET`` rows: such a page
may hold fewer than ``limit`` tasks (even none) and still carry a ``next_cursor``, so a page
costs a bounded number of index steps whatever the table holds. The cursor is the position
(created_at_ms, id) of the last row the page passed, so rows inserted meanwhile never shift
the pages (new tasks are newer than every cursor: newest-first never sees them again,
oldest-first reaches them at the end).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from orbit_wire.errors import ErrorCode, OrbitError
from orbit_wire.ids import is_id
from orbit_wire.labels import labels_match
from orbit_wire.model import Capability, TaskState

from .query import Choice, Int, Param, Query, Text, once, parse_query

DEFAULT_LIMIT: Final = 50
MAX_LIMIT: Final = 500
# Rows one page may scan when a filter is applied outside the index.
SCAN_BUDGET: Final = 1_000
ORDERS: Final = ("newest", "oldest")
MAX_CURSOR: Final = 128
MAX_INSTANT: Final = 2**53


@dataclass(frozen=True, slots=True)
class Position:
    """A row's place in the list order."""

    created_at_ms: int
    id: str


@dataclass(frozen=True, slots=True)
class TaskFilter:
    """What a task list asks for. Empty ``states`` means every state."""

    states: tuple[TaskState, ...] = ()
    handler: str | None = None
    handler_version: str | None = None
    payload_version: str | None = None
    created_after: int | None = None  # inclusive bounds, epoch ms
    created_before: int | None = None
    finished_after: int | None = None
    finished_before: int | None = None
    newest_first: bool = True
    limit: int = DEFAULT_LIMIT
    after: Position | None = None  # the cursor: rows strictly past this position

    @property
    def scanned_filters(self) -> bool:
        """True when a filter is checked on scanned rows rather than by the index range."""
        return (self.handler is not None or self.handler_version is not None
                or self.payload_version is not None or self.finished_after is not None
                or self.finished_before is not None)

    @property
    def scan_size(self) -> int:
        """Rows each state range reads: one more than a page (to know if more exist), or
        the scan budget when rows are filtered after the index."""
        return max(SCAN_BUDGET, self.limit + 1) if self.scanned_filters else self.limit + 1

    def wanted_states(self) -> tuple[TaskState, ...]:
        return self.states or tuple(TaskState)

    def matches(self, row: Mapping[Any, Any]) -> bool:
        """The filters the index range does not apply, on one scanned row."""
        if self.handler is not None and row["handler"] != self.handler:
            return False
        if self.handler_version is not None and row["handler_version"] != self.handler_version:
            return False
        if self.payload_version is not None and row["payload_version"] != self.payload_version:
            return False
        finished = row["finished_at_ms"]
        if self.finished_after is not None and (finished is None
                                                or finished < self.finished_after):
            return False
        return not (self.finished_before is not None
                    and (finished is None or finished > self.finished_before))


def encode_cursor(filt: TaskFilter, pos: Position) -> str:
    order = "n" if filt.newest_first else "o"
    raw = f"{order}.{pos.created_at_ms}.{pos.id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(text: str, newest_first: bool) -> Position:
    """The position a cursor names; BAD_REQUEST for anything this list did not make."""
    bad = OrbitError(ErrorCode.BAD_REQUEST, "cursor is not one this list returned")
    if not text or len(text) > MAX_CURSOR:
        raise bad
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise bad from None
    parts = raw.split(".")
    if len(parts) != 3 or parts[0] != ("n" if newest_first else "o"):
        raise OrbitError(ErrorCode.BAD_REQUEST,
                         "cursor is not one this list returned (or the order changed)")
    created, task_id = parts[1], parts[2]
    if not created.isdigit() or not is_id(task_id):
        raise bad
    return Position(int(created), task_id)


@dataclass(frozen=True, slots=True)
class States:
    """The ``state`` parameter: state names, comma-separated, in any case, blanks skipped;
    it may be repeated (every value adds its states). Only the ``allowed`` states are
    taken (``why`` ends the refusal of another)."""

    name: str = "state"
    default: tuple[TaskState, ...] = ()
    allowed: tuple[TaskState, ...] = tuple(TaskState)
    why: str = ""

    def parse(self, values: Sequence[str]) -> tuple[TaskState, ...]:
        states: list[TaskState] = []
        for value in values:
            for part in value.split(","):
                name = part.strip().upper()
                if not name:
                    continue
                try:
                    if not name.isascii():  # some non-ASCII letters upper() to ASCII ones
                        raise ValueError(part)
                    state = TaskState(name)
                    if state not in self.allowed:
                        raise ValueError(part)
                except ValueError:
                    raise OrbitError(ErrorCode.BAD_REQUEST, f"state {part!r} is not one of "
                                     f"{', '.join(s.value for s in self.allowed)}"
                                     f"{self.why}") from None
                if state not in states:
                    states.append(state)
        return tuple(states)


@dataclass(frozen=True, slots=True)
class Cursor:
    """The opaque cursor: at most ``MAX_CURSOR`` characters, empty reads as absent (what it
    names is read by ``decode_cursor``, against the order)."""

    name: str = "cursor"
    default: None = None

    def parse(self, values: Sequence[str]) -> str | None:
        raw = once(self.name, values)
        if len(raw) > MAX_CURSOR:
            raise OrbitError(ErrorCode.BAD_REQUEST, "cursor is not one this list returned")
        return raw or None


# The task list's parameters (docs/http-api.md "Listing tasks").
LIST_QUERY: Final[tuple[Param, ...]] = (
    States(), Text("handler"), Text("handler_version"), Text("payload_version"),
    *(Int(name, 0, MAX_INSTANT) for name in (
        "created_after", "created_before", "finished_after", "finished_before")),
    Choice("order", ORDERS, "newest"), Int("limit", 1, MAX_LIMIT, DEFAULT_LIMIT),
    Cursor(),
)


def parse_filter(params: Query) -> TaskFilter:
    """A TaskFilter from query parameters (each name to its values, repeats allowed where
    ``LIST_QUERY`` allows them). BAD_REQUEST names the parameter at fault."""
    return task_filter(parse_query(params, LIST_QUERY))


def task_filter(q: Mapping[str, Any]) -> TaskFilter:
    """A TaskFilter from ``LIST_QUERY``'s parsed parameters."""
    newest = q["order"] == "newest"
    return TaskFilter(
        states=q["state"], handler=q["handler"], handler_version=q["handler_version"],
        payload_version=q["payload_version"], created_after=q["created_after"],
        created_before=q["created_before"], finished_after=q["finished_after"],
        finished_before=q["finished_before"], newest_first=newest, limit=q["limit"],
        after=None if q["cursor"] is None else decode_cursor(q["cursor"], newest),
    )


# A bulk retry's filter (docs/http-api.md "Retrying ended tasks"): the list's filters
# without its order, page size and cursor (a bulk retry walks every page, oldest first), and
# only the states a retry takes tasks from.
RETRYABLE: Final = (TaskState.FAILED, TaskState.CANCELLED)
RETRY_QUERY: Final[tuple[Param, ...]] = (
    States(allowed=RETRYABLE, why=": only FAILED and CANCELLED tasks can be run again"),
    *(p for p in LIST_QUERY if p.name not in ("state", "order", "limit", "cursor")))


# The other bulk actions' filters (docs/flow-control.md "Bulk actions"): the same
# parameters, with the states each action takes tasks from. Keys (issue 31's limits) join
# here as one more parameter of _BULK_FILTERS once TaskFilter can match them.
CANCELLABLE: Final = (TaskState.PENDING, TaskState.RUNNING, TaskState.NEEDS_REVIEW)
_BULK_FILTERS: Final = tuple(p for p in RETRY_QUERY if p.name != "state")
CANCEL_QUERY: Final[tuple[Param, ...]] = (
    States(allowed=CANCELLABLE, why=": only PENDING, RUNNING and NEEDS_REVIEW tasks can "
           "be cancelled"), *_BULK_FILTERS)
REVIEW_QUERY: Final[tuple[Param, ...]] = (
    States(allowed=(TaskState.NEEDS_REVIEW,), why=": only NEEDS_REVIEW tasks are reviewed"),
    *_BULK_FILTERS)


def retry_filter(q: Mapping[str, Any], page: int, now_ms: int,
                 default: tuple[TaskState, ...] = RETRYABLE) -> TaskFilter:
    """A TaskFilter from ``RETRY_QUERY``'s (or another bulk action's) parsed parameters:
    tasks of the ``default`` states (FAILED and CANCELLED for a retry) or of those asked,
    oldest first, ``page`` a page, created at the latest ``now_ms`` (a task created during
    the action is not part of it)."""
    states = q["state"] or default
    before = now_ms if q["created_before"] is None else min(q["created_before"], now_ms)
    return TaskFilter(
        states=tuple(states), handler=q["handler"], handler_version=q["handler_version"],
        payload_version=q["payload_version"], created_after=q["created_after"],
        created_before=before, finished_after=q["finished_after"],
        finished_before=q["finished_before"], newest_first=False, limit=page)


def cut_page(filt: TaskFilter, streams: Iterable[Sequence[Mapping[Any, Any]]]
             ) -> tuple[list[Mapping[Any, Any]], Position | None]:
    """The page's rows and the position of its next cursor (None: the list ends here),
    from each state's range as read (ordered, at most ``filt.scan_size`` rows each).

    Every range holds the first ``scan_size`` rows of its state past the cursor, so the
    first ``scan_size`` rows of their merge are exactly the list's next ``scan_size`` rows."""
    size = filt.scan_size
    merged = sorted((row for stream in streams for row in stream),
                    key=lambda r: (r["created_at_ms"], r["id"]), reverse=filt.newest_first)
    scanned = merged[:size]
    page: list[Mapping[Any, Any]] = []
    for row in scanned:
        if not filt.scanned_filters or filt.matches(row):
            if len(page) == filt.limit:
                return page, _pos(page[-1])  # a matching row lies past the page
            page.append(row)
    if len(merged) > size or (len(scanned) == size and filt.scanned_filters):
        # More rows lie beyond the scanned ones: continue after the last row scanned.
        return page, _pos(scanned[-1])
    return page, None


def _pos(row: Mapping[Any, Any]) -> Position:
    return Position(int(row["created_at_ms"]), str(row["id"]))


# ------------------------------------------------------------------- silent waiting

NO_LIVE_WORKER: Final = "NO_LIVE_WORKER"
NO_MATCHING_WORKER: Final = "NO_MATCHING_WORKER"


def waiting_fact(state: str, capability: Capability, created_at_ms: int,
                 offered: Mapping[Capability, int | None],
                 requires: Mapping[str, str] | None = None,
                 live_labels: Sequence[Mapping[str, str]] = ()) -> dict[str, Any] | None:
    """What a PENDING task waits for, when no live worker of its queue offers its
    capability: ``{"reason": "NO_LIVE_WORKER", "capability", "since"}``; when live ones
    do but none has every label the task ``requires``: ``{"reason": "NO_MATCHING_WORKER",
    "capability", "requires", "since"}`` (``since``: the submit); else None.

    ``offered`` maps each capability of the queue's instances to when the last one
    offering it was seen, or None while one is live; ``live_labels`` holds the labels of
    each live instance offering ``capability``. ``since`` is the later of the task's
    submit and that last sighting."""
    if state != TaskState.PENDING.value:
        return None
    if capability in offered and offered[capability] is None:
        if not requires or any(labels_match(labels, requires) for labels in live_labels):
            return None
        return {"reason": NO_MATCHING_WORKER, "capability": capability.to_dict(),
                "requires": dict(requires), "since": created_at_ms}
    last_seen = offered.get(capability)
    return {"reason": NO_LIVE_WORKER, "capability": capability.to_dict(),
            "since": created_at_ms if last_seen is None else max(created_at_ms, last_seen)}


class WarnOnce:
    """Which unserved (queue, capability) pairs to log now: each at most once per
    ``interval`` (clock units of the caller); pairs not seen for two intervals are forgotten,
    so the memory stays as small as the unserved set."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._warned: dict[tuple[str, str], float] = {}

    def due(self, items: Iterable[Mapping[str, Any]], now: float) -> list[Mapping[str, Any]]:
        out = []
        for item in items:
            key = (str(item["queue_id"]), str(sorted(item["capability"].items())))
            last = self._warned.get(key)
            if last is None or now - last >= self.interval:
                self._warned[key] = now
                out.append(item)
        for key in [k for k, at in self._warned.items() if now - at > 2 * self.interval]:
            del self._warned[key]
        return out
