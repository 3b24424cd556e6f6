"""The producer channel's state (orbit_wire/producer_frames.py), shared by the blocking and
the asyncio drivers. Pure: no I/O, no clock; randomness comes in as ``draw``.

It holds what must survive a dropped connection: every submit not yet answered (its frame,
sent again unchanged after a reconnect: the same request id and the same operation keys, so
a resend never makes a second task), every task somebody waits for (watched again after a
reconnect; one that ended meanwhile is pushed at once), and the terminal views received
lately (a wait for one of them ends without a frame). Callers hand in a *box* (a function of
one argument) with each submit and each wait; every method returns the ``Post``\\ s to run
outside the driver's lock, each putting one item in one box:

- a submit's box gets the list of task views (in the order of its specs), or an exception;
- a wait's box gets ``(task_id, view)`` for each task as it settles (``view`` None: the
  server knows no such task), or an exception that ends the wait.

The driver's calling contract: after ``connected()`` send the frames it returns, in order;
after ``submit`` or ``wait`` send the frames they return (none while not connected: then open
a connection, whose ``connected()`` sends everything); hand every text frame read to
``receive`` and drop the connection when its ``drop`` is set; after a drop call
``disconnected()``, and while ``busy`` reconnect, pausing ``next_pause()`` before each try
(None: the tries are spent, call ``fail_all``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from typing import Any, NamedTuple

import msgspec

from orbit_host.backoff import delays
from orbit_wire.errors import ErrorCode, ProtocolError
from orbit_wire.model import TaskState
from orbit_wire.producer_frames import (
    MAX_WATCH,
    Ended,
    Failure,
    ProducerError,
    Submit,
    Submitted,
    Watch,
    Watching,
    decode_server_message,
    encode_message,
)

from .calls import null_result_json, with_result_json
from .errors import OrbitApiError, status_for_code

__all__ = ["MAX_PUSHED", "MAX_SETTLED_BYTES", "MAX_SETTLED_VIEWS", "ChannelCore", "Post",
           "Reaction", "SubmitBox", "WaitBox", "error_of", "run_posts"]

# Terminal views kept for waits that come after the push, oldest dropped first.
MAX_SETTLED_VIEWS = 4096
MAX_SETTLED_BYTES = 64 * 1024 * 1024
# Tasks the server pushes for on a connection, not settled yet: past this many a submit does
# not ask for pushes (a wait asks then), so a producer with a backlog never has the server
# re-read thousands of watched tasks for it.
MAX_PUSHED = 1000
# Connection tries in a row that bring nothing (a refused connect, or a connection that ends
# before the server said anything) before every pending call fails.
# Six tries span about 3 s: enough to ride out a server's restart.
MAX_STRIKES = 6
FIRST_PAUSE_S = 0.1
MAX_PAUSE_S = 2.0

SubmitBox = Callable[[list[dict[str, Any]] | BaseException], None]
WaitBox = Callable[[tuple[str, dict[str, Any] | None] | BaseException], None]
Post = Callable[[], None]

_TERMINAL = frozenset(state.value for state in TaskState if state.terminal)
_SETTLED = frozenset(state.value for state in TaskState if state.settled)


class Reaction(NamedTuple):
    """What one received frame calls for: posts to run, and whether to drop the connection
    (the server broke the contract, or failed the connection: every call failed with it)."""

    posts: list[Post]
    drop: bool = False


class _RawViews(msgspec.Struct):
    """The task views of a ``submitted`` or ``ended`` frame as the exact text sent."""

    task: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
    tasks: tuple[msgspec.Raw, ...] = ()


_RAW_VIEWS = msgspec.json.Decoder(_RawViews)
def run_posts(posts: Iterable[Post]) -> None:
    """Deliver each item to its box (drivers call it outside their lock)."""
    for post in posts:
        post()


def error_of(failure: Failure) -> OrbitApiError:
    """The server's error as the client raises it, with the HTTP status it stands for."""
    try:
        code = ErrorCode(failure.code)
    except ValueError:  # a code this client does not know yet: keep it readable
        return OrbitApiError(ErrorCode.INTERNAL, f"{failure.code}: {failure.message}",
                             status=500, retryable=failure.retryable)
    return OrbitApiError(code, failure.message, status=status_for_code(code),
                         retryable=failure.retryable)


class _Submit(NamedTuple):
    frame: bytes
    watch: bool
    box: SubmitBox


class ChannelCore:
    """See the module docstring. Not thread-safe: the blocking driver holds a lock around
    every call."""

    def __init__(self, draw: Callable[[], float], *, max_strikes: int = MAX_STRIKES,
                 max_settled: int = MAX_SETTLED_VIEWS,
                 max_settled_bytes: int = MAX_SETTLED_BYTES) -> None:
        self._draw = draw
        self._max_strikes = max_strikes
        self._max_settled = max_settled
        self._max_settled_bytes = max_settled_bytes
        self._last_id = 0
        self._open = False
        self._heard = False  # the server said something on this connection
        self._strikes = 0
        self._pauses = self._new_pauses()
        self._submits: dict[int, _Submit] = {}  # request id -> submit, until answered
        self._watches: dict[int, tuple[str, ...]] = {}  # watch id -> its tasks, until answered
        self._pushed: set[str] = set()  # tasks the server pushes ``ended`` for on this connection
        self._waits: dict[int, tuple[WaitBox, set[str]]] = {}  # waiter -> box, tasks left
        self._waited: dict[str, set[int]] = {}  # task -> its waiters
        self._settled: OrderedDict[str, tuple[dict[str, Any], int]] = OrderedDict()
        self._settled_bytes = 0

    # ------------------------------------------------------------------ state

    @property
    def open(self) -> bool:
        return self._open

    @property
    def busy(self) -> bool:
        """Something waits for the server: a submit not answered, or a wait not over."""
        return bool(self._submits or self._waits)

    def pending_submits(self) -> int:
        return len(self._submits)

    def waited_tasks(self) -> frozenset[str]:
        return frozenset(self._waited)

    # ------------------------------------------------------------------ calls

    def submit(self, queue_id: str, specs: Sequence[bytes], box: SubmitBox, *,
               watch: bool | None = None) -> tuple[int, list[bytes]]:
        """Register a submit of ``specs`` (TaskSpec JSON texts, each with its operation key);
        its request id, and the frames to send now. ``watch`` None: push the tasks' ends
        unless MAX_PUSHED tasks are watched already."""
        if watch is None:
            watch = len(self._pushed) < MAX_PUSHED
        request = self._new_id()
        frame = encode_message(Submit(request, queue_id, tuple(msgspec.Raw(s) for s in specs),
                                      watch))
        self._submits[request] = _Submit(frame, watch, box)
        return request, [frame] if self._open else []

    def abandon(self, request: int) -> None:
        """The caller of submit ``request`` stopped waiting: never send it again."""
        self._submits.pop(request, None)

    def wait(self, task_ids: Iterable[str], box: WaitBox) -> tuple[int, list[Post], list[bytes]]:
        """Register a wait for ``task_ids``: the waiter id, posts for the tasks whose terminal
        view is known already, and the frames to send now."""
        waiter = self._new_id()
        posts: list[Post] = []
        left: set[str] = set()
        for task_id in dict.fromkeys(task_ids):
            known = self._settled.get(task_id)
            # NEEDS_REVIEW is settled but may change (an operator's retry): ask again.
            if known is not None and known[0].get("state") in _TERMINAL:
                self._settled.move_to_end(task_id)
                posts.append(partial(box, (task_id, known[0])))
            else:
                left.add(task_id)
        if not left:
            return waiter, posts, []
        self._waits[waiter] = (box, left)
        for task_id in left:
            self._waited.setdefault(task_id, set()).add(waiter)
        frames = self._watch([t for t in left if t not in self._pushed]) if self._open else []
        return waiter, posts, frames

    def stop_waiting(self, waiter: int) -> None:
        """The waiter is done (all delivered, its time is up, or it failed)."""
        entry = self._waits.pop(waiter, None)
        if entry is None:
            return
        for task_id in entry[1]:
            waiters = self._waited.get(task_id)
            if waiters is not None:
                waiters.discard(waiter)
                if not waiters:
                    del self._waited[task_id]

    # ------------------------------------------------------------------ the connection

    def connected(self) -> list[bytes]:
        """A connection is open: the frames to send first, in order (every submit not
        answered, then watches for every task waited for)."""
        self._open = True
        self._heard = False
        frames = [submit.frame for submit in self._submits.values()]
        return frames + self._watch([t for t in self._waited if t not in self._pushed])

    def disconnected(self) -> None:
        """The connection is gone: what the server was to push on it is forgotten."""
        if self._open and not self._heard:
            self._strikes += 1
        self._open = False
        self._pushed.clear()
        self._watches.clear()

    def connect_failed(self) -> None:
        self._strikes += 1

    def next_pause(self) -> float | None:
        """Seconds to pause before the next connection try, or None when the tries in a row
        are spent."""
        if self._strikes >= self._max_strikes:
            return None
        return 0.0 if self._strikes == 0 else next(self._pauses)

    def fail_all(self, error: BaseException) -> list[Post]:
        """Every submit not answered and every wait not over fails with ``error`` (the tries
        are spent, the server refused the channel, or the client is closing); the next use
        starts afresh."""
        posts: list[Post] = [partial(s.box, error) for s in self._submits.values()]
        posts += [partial(box, error) for box, _ in self._waits.values()]
        self._submits.clear()
        self._waits.clear()
        self._waited.clear()
        self._strikes = 0
        self._pauses = self._new_pauses()
        return posts

    def receive(self, data: bytes | str) -> Reaction:
        """One text frame from the server."""
        try:
            message = decode_server_message(data)
        except ProtocolError as exc:
            return self._broken(OrbitApiError(
                ErrorCode.INTERNAL, f"the server sent a bad producer frame: {exc.message}",
                status=500, retryable=False))
        self._heard = True
        if self._strikes:
            self._strikes = 0
            self._pauses = self._new_pauses()
        match message:
            case Submitted(id=request, tasks=tasks):
                submit = self._submits.pop(request, None)
                if submit is None:  # abandoned, or answered on a connection before
                    return Reaction([])
                views = self._views(tasks, data, many=True)
                if views is None:
                    return self._broken(_bad_view("submitted"))
                posts: list[Post] = [partial(submit.box, views)]
                for view in views:
                    if view.get("state") in _SETTLED:
                        posts += self._ended(view, len(data) // len(views))  # a share of the frame
                    elif submit.watch and view["id"] not in self._settled:
                        self._pushed.add(view["id"])
                return Reaction(posts)
            case Watching(id=request, unknown=unknown):
                self._watches.pop(request, None)
                posts = []  # the answer to the watch itself needs no post
                for task_id in unknown:
                    self._pushed.discard(task_id)
                    posts += self._deliver(task_id, None)
                return Reaction(posts)
            case Ended(task=task):
                found = self._views((task,), data, many=False)
                if found is None:
                    return self._broken(_bad_view("ended"))
                return Reaction(self._ended(found[0], len(data)))
            case ProducerError(error=failure, id=None):
                return self._broken(error_of(failure))
            case ProducerError(error=failure, id=request):
                return Reaction(self._refused(request, error_of(failure)))
        return Reaction([])  # pragma: no cover - the union above is exhaustive

    # ------------------------------------------------------------------ inside

    def _new_id(self) -> int:
        self._last_id += 1
        return self._last_id

    def _new_pauses(self) -> Iterator[float]:
        return delays(FIRST_PAUSE_S, MAX_PAUSE_S, jitter=0.5, draw=self._draw)

    def _watch(self, task_ids: list[str]) -> list[bytes]:
        frames = []
        for start in range(0, len(task_ids), MAX_WATCH):
            chunk = tuple(task_ids[start:start + MAX_WATCH])
            request = self._new_id()
            self._watches[request] = chunk
            self._pushed.update(chunk)
            frames.append(encode_message(Watch(request, chunk)))
        return frames

    def _broken(self, error: OrbitApiError) -> Reaction:
        return Reaction(self.fail_all(error), drop=True)

    def _refused(self, request: int | None, error: OrbitApiError) -> list[Post]:
        submit = self._submits.pop(request, None) if request is not None else None
        if submit is not None:
            return [partial(submit.box, error)]
        tasks = self._watches.pop(request, ()) if request is not None else ()
        waiters = {w for t in tasks for w in self._waited.get(t, ())}
        self._pushed.difference_update(tasks)
        posts: list[Post] = [partial(self._waits[w][0], error) for w in sorted(waiters)]
        for waiter in waiters:
            self.stop_waiting(waiter)
        return posts

    def _ended(self, view: dict[str, Any], size: int) -> list[Post]:
        task_id = view["id"]
        self._pushed.discard(task_id)
        self._remember(task_id, view, size)
        return self._deliver(task_id, view)

    def _deliver(self, task_id: str, view: dict[str, Any] | None) -> list[Post]:
        posts: list[Post] = []
        for waiter in sorted(self._waited.pop(task_id, ())):
            box, left = self._waits[waiter]
            left.discard(task_id)
            if not left:
                del self._waits[waiter]
            posts.append(partial(box, (task_id, view)))
        return posts

    def _remember(self, task_id: str, view: dict[str, Any], size: int) -> None:
        old = self._settled.pop(task_id, None)
        if old is not None:
            self._settled_bytes -= old[1]
        self._settled[task_id] = (view, size)
        self._settled_bytes += size
        while self._settled and (len(self._settled) > self._max_settled
                                 or self._settled_bytes > self._max_settled_bytes):
            _, (_, dropped) = self._settled.popitem(last=False)
            self._settled_bytes -= dropped

    @staticmethod
    def _views(values: Sequence[Any], data: bytes | str,
               many: bool) -> list[dict[str, Any]] | None:
        """The task views of a frame with ``result_json`` attached; None if one is not a
        task view."""
        if not all(isinstance(v, dict) and isinstance(v.get("id"), str) for v in values):
            return None
        views: list[dict[str, Any]] = list(values)
        if any(v.get("result") is not None for v in views):
            raw = _RAW_VIEWS.decode(data)
            texts = raw.tasks if many else (raw.task,)
            for view, text in zip(views, texts, strict=True):
                with_result_json(view, bytes(text))
        else:
            for view in views:
                view["result_json"] = null_result_json(view)
        return views


def _bad_view(kind: str) -> OrbitApiError:
    return OrbitApiError(ErrorCode.INTERNAL, f"the server's {kind} frame holds no task view",
                         status=500, retryable=False)
