"""The blocking client for the Orbit HTTP API (docs/http-api.md) and the producer channel
(docs/producers.md).

``OrbitClient`` sends the Calls of calls.py over keep-alive connections (transport.py) and
raises OrbitApiError for every failure (ServerUnreachable when no answer came). Submits and
waits go over the producer channel when the server offers it (channel.py; client_base.py
says when): a submit is answered once committed, and a wait ends when the server pushes the
task's terminal view, without long polls. ``AsyncOrbitClient`` (async_client.py) has the same
methods as coroutines. Close the client (or use ``with``) to release the connections.

Two ways to submit (docs/producers.md): ``submit(task_type, payload, ...)`` with a shared
``TaskType`` answers a typed ``Task`` and ``result(task, timeout=...)`` its result or a
typed error (tasks.py); ``submit(queue_id, spec_dict)`` and ``wait`` are the dict API.

No HTTP call is retried automatically: a request that got no answer may still have been
applied (a submit without an ``operation_key`` could then create a second task). Retry on
``exc.retryable`` yourself; give submits an operation key to make that safe. Over the
channel every submit carries an operation key, and one sent when the connection dropped is
sent again, unchanged, on the next connection.

The bearer secret is held in the Authorization header only; it never appears in a repr, an
error message or a log line written by this module.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, overload

from orbit_host.credentials import Credentials
from orbit_wire.tasktype import Signature, TaskType

from . import calls
from .canvas import Canvas
from .client_base import (
    DEFAULT_MAX_CONNECTIONS,
    MAX_PAGES,
    MAX_WAIT_ROUNDS,
    ClientBase,
    CredentialsArg,
    NotBefore,
    OneTask,
    P,
    R,
    check_max_connections,
    is_settled,
    verify_for,
)
from .errors import certificate_refused, unreachable
from .tasks import Task, TaskTimeout, outcome
from .transport import BlockingTransport, CertificateRefused, NoAnswer
from .workflow_handle import Workflow, WorkflowMethods, is_canvas, with_workflow_body

if TYPE_CHECKING:  # the channel's modules load on its first use
    from .channel import BlockingChannel
    from .channel_link import ChannelRefused

__all__ = ["OrbitClient", "is_settled"]


class OrbitClient(WorkflowMethods, ClientBase):
    """Blocking client. ``credentials`` is a Credentials, a credentials file path, or None
    (only ``health`` works without one); ``url`` overrides the credentials' URL."""

    def __init__(
        self,
        url: str | None = None,
        credentials: CredentialsArg = None,
        *,
        timeout: float = 30.0,
        verify: bool | str = True,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        ca_file: str | None = None,
        queue: str | None = None,
        channel: bool = True,
    ):
        super().__init__(url, credentials, timeout, queue, channel)
        verified = verify_for(verify, ca_file)
        # Threads sharing this client wait there for a free connection, never against a
        # timeout (a request that merely waited its turn must not look like a dead server).
        self._http = BlockingTransport(self.url, self._headers,
                                       check_max_connections(max_connections), timeout,
                                       verified)
        self._tls = self._channel_tls(verified)
        self._channel: BlockingChannel | None = None
        self._channel_lock = threading.Lock()

    def __enter__(self) -> OrbitClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._channel_lock:
            channel, self._channel = self._channel, None
        if channel is not None:
            channel.close()
        self._http.close()

    def _send(self, call: calls.Call) -> dict[str, Any]:
        try:
            answer = self._http.request(call.method, call.path, call.params, call.body,
                                        self._read_timeout(call))
        except CertificateRefused as exc:
            raise certificate_refused(self.url, str(exc)) from None
        except NoAnswer as exc:
            raise unreachable(self.url, exc.kind) from None
        return calls.decode(call, answer.status, answer.body)

    # ------------------------------------------------------------------ the channel

    def _open_channel(self) -> BlockingChannel | None:
        """The producer channel, when it serves (created on first use; it connects then)."""
        if not self._channel_wanted:
            return None
        with self._channel_lock:
            if self._channel is None:
                from .channel import BlockingChannel

                self._channel = BlockingChannel(self.url, self._headers, self._tls,
                                                self._timeout)
            return self._channel

    def _refused(self, refusal: ChannelRefused) -> None:
        if refusal.for_good:
            self._channel_wanted = False

    def _submit_all(self, queue_id: str, specs: Sequence[Mapping[str, Any]],
                    batch: bool) -> list[dict[str, Any]]:
        """Submit over the channel, or over HTTP when it does not serve."""
        channel = self._open_channel()
        if channel is not None:
            from .channel_link import ChannelRefused

            specs, texts = self._channel_texts(specs, batch)
            try:
                if self._fits_channel(texts):
                    return channel.submit(calls.queue_ref(queue_id), texts)
            except ChannelRefused as refusal:
                self._refused(refusal)  # the keyed specs go over HTTP: still applied once
        if batch:
            return calls.tasks_of(self._send(calls.submit_batch(queue_id, specs)))
        return [self._send(calls.submit(queue_id, specs[0]))]

    def _pushed(self, task_ids: list[str], deadline: float
                ) -> Iterator[tuple[str, dict[str, Any]]]:
        """``(task_id, view)`` as each task settles, over the channel, until ``deadline``;
        nothing when the channel does not serve."""
        channel = self._open_channel()
        if channel is None or deadline <= time.monotonic():
            return
        from .channel_link import ChannelRefused

        try:
            for task_id, view in channel.settled(task_ids, deadline - time.monotonic()):
                if view is not None:  # else unknown there: HTTP says why
                    yield task_id, view
        except ChannelRefused as refusal:
            self._refused(refusal)

    def _poll(self, task_id: str, deadline: float) -> dict[str, Any]:
        """The task once settled, or as it is at ``deadline``: long polls over HTTP."""
        task = self._send(calls.get_task(task_id))
        for _ in range(MAX_WAIT_ROUNDS):
            left_ms = int((deadline - time.monotonic()) * 1000)
            if is_settled(task) or left_ms <= 0:
                break
            task = self._send(calls.get_task(task_id, min(left_ms, calls.MAX_WAIT_MS)))
        return task

    def health(self) -> dict[str, Any]:
        return self._send(calls.health())

    def create_queue(self, name: str | None = None) -> dict[str, Any]:
        return self._send(calls.create_queue(name))

    def queue_stats(self, queue_id: str) -> dict[str, Any]:
        return self._send(calls.queue_stats(queue_id))

    def capabilities(self, queue_id: str) -> dict[str, Any]:
        """The queue's registered capabilities, each with its declared policy."""
        return self._send(calls.capabilities(queue_id))

    def create_credential(
        self,
        role: str,
        queues: Sequence[str] = (),
        name: str | None = None,
        *,
        path: str | os.PathLike[str] | None = None,
        expires_at_ms: int | None = None,
    ) -> Credentials:
        """Create a credential; with ``path`` also write its credentials file (mode 0600)."""
        return self._new_credentials(self._send(calls.create_credential(
            role, queues, name, expires_at_ms)), path)

    def list_credentials(self) -> list[dict[str, Any]]:
        """Every credential, without secrets (admin)."""
        return list(self._send(calls.list_credentials())["credentials"])

    def rotate_credential(self, credential_id: str, grace_ms: int = 0, *,
                          path: str | os.PathLike[str] | None = None,
                          expires_at_ms: int | None = None) -> Credentials:
        """A new secret; the old one works ``grace_ms`` more. With ``path`` the new
        credentials file is written (mode 0600)."""
        return self._new_credentials(self._send(calls.rotate_credential(
            credential_id, grace_ms, expires_at_ms)), path)

    def revoke_credential(self, credential_id: str) -> dict[str, Any]:
        return self._send(calls.revoke_credential(credential_id))

    @overload
    def submit(self, target: Canvas, *, queue: str | None = None, name: str | None = None,
               operation_key: str | None = None) -> Workflow: ...

    @overload
    def submit(self, target: Signature[Any, R], *, queue: str | None = None
               ) -> Task[R]: ...

    @overload
    def submit(self, target: str, payload: Mapping[str, Any]) -> dict[str, Any]: ...

    @overload
    def submit(self, target: TaskType[P, R], payload: P, *, queue: str | None = None,
               idempotent: bool | None = None, operation_key: str | None = None,
               priority: int | None = None, delay_ms: int | None = None,
               not_before: NotBefore = None, **policy: Any) -> Task[R]: ...

    def submit(self, target: Any, payload: Any = None, *, queue: str | None = None,
               not_before: NotBefore = None, **options: Any) -> Any:
        """``submit(task_type, payload, ...)``: one task of the declared type, as a typed
        ``Task`` (``queue`` defaults to the client's, then the credential's only queue;
        ``options`` are TaskType.spec's). ``submit(queue_id, spec)``: the dict API.
        ``submit(canvas)`` (chain, group, chord, Graph): a workflow, as ``submit_workflow``;
        ``submit(signature)``: its one task."""
        if is_canvas(target):
            return self.submit_workflow(target, queue=queue, **options)
        if isinstance(target, Signature):
            target, payload, options = target.task_type, target.payload, {**target.options,
                                                                          **options}
        if isinstance(target, str):
            spec = self._dict_submit(payload, queue, not_before, options)
            return self._submit_all(target, [spec], batch=False)[0]
        queue_id, typed = self._typed_submit(target, payload, queue, not_before, options)
        return Task.from_view(self._submit_all(queue_id, [typed], batch=False)[0])

    def task(self, task_id: str) -> Task[Any]:
        """The task now, typed."""
        return Task.from_view(self.get_task(task_id))

    @overload
    def result(self, task: Task[R], timeout: float) -> R: ...

    @overload
    def result(self, task: str, timeout: float) -> Any: ...

    def result(self, task: Task[Any] | str, timeout: float) -> Any:
        """Wait up to ``timeout`` seconds; the task's result once SUCCEEDED, else TaskFailed,
        TaskNeedsReview, TaskCancelled, or TaskTimeout (the task goes on)."""
        return outcome(Task.from_view(self.wait(task, timeout)), timeout)

    def submit_batch(
        self, queue_id: str, specs: Sequence[Mapping[str, Any]]
    ) -> list[dict[str, Any]]:
        """Up to 1000 tasks in one transaction (all or nothing); their views in order."""
        return self._submit_all(queue_id, specs, batch=True)

    def get_task(self, task_id: str, wait_ms: int | None = None) -> dict[str, Any]:
        """The task now, or (with ``wait_ms`` ≤ 60000) once settled or when the wait ends."""
        call = calls.get_task(task_id, wait_ms)
        if not wait_ms:
            return self._send(call)
        deadline = time.monotonic() + wait_ms / 1000
        for _, view in self._pushed([task_id], deadline):
            return view
        left_ms = int((deadline - time.monotonic()) * 1000)
        return self._send(calls.get_task(task_id, left_ms if left_ms > 0 else None))

    # A str is also an Iterable[str]: this first overload wins for it, as meant.
    @overload
    def wait(  # type: ignore[overload-overlap]
            self, tasks: OneTask, timeout: float) -> dict[str, Any]: ...

    @overload
    def wait(self, tasks: Iterable[OneTask], timeout: float) -> list[dict[str, Any]]: ...

    def wait(self, tasks: OneTask | Iterable[OneTask], timeout: float) -> Any:
        """Wait until the task is settled (terminal or NEEDS_REVIEW) or ``timeout`` seconds
        passed, and return its view as it is then. ``tasks`` is one task (ID or Task), or
        several: then their views, in the order given, once all settled or at the timeout."""
        ids, one = self._task_ids(tasks)
        deadline = time.monotonic() + timeout
        views = dict(self._pushed(list(dict.fromkeys(ids)), deadline))
        for task_id in ids:
            if task_id not in views:
                views[task_id] = self._poll(task_id, deadline)
        return views[ids[0]] if one else [views[task_id] for task_id in ids]

    def as_completed(self, tasks: Iterable[OneTask], timeout: float
                     ) -> Iterator[dict[str, Any]]:
        """Yield each task's view as it settles (terminal or NEEDS_REVIEW), each task once.
        When ``timeout`` seconds pass first, raise TaskTimeout for the first task left in the
        order given (``pending``: the IDs of all left); the tasks go on. Over HTTP the views
        come in the order given, each once settled (long polls, one task at a time)."""
        ids, _ = self._task_ids(tasks)
        left = dict.fromkeys(ids)
        deadline = time.monotonic() + timeout
        for task_id, view in self._pushed(list(left), deadline):
            del left[task_id]
            yield view
        order = list(left)
        for index, task_id in enumerate(order):
            view = self._poll(task_id, deadline)
            if not is_settled(view):
                raise TaskTimeout(Task.from_view(view), timeout, tuple(order[index:]))
            yield view

    def cancel(self, task_id: str, reason: str | None = None) -> dict[str, Any]:
        return self._send(calls.cancel(task_id, reason))

    def attempts(self, task_id: str) -> dict[str, Any]:
        return self._send(calls.attempts(task_id))

    def audit(self, task_id: str) -> dict[str, Any]:
        return self._send(calls.audit(task_id))

    def retry(self, task_id: str, reason: str | None = None) -> dict[str, Any]:
        """Run a FAILED or CANCELLED task again; its view (CONFLICT in another state)."""
        return self._send(calls.retry(task_id, reason))

    def retry_tasks(self, queue_id: str, **filters: Any) -> dict[str, Any]:
        """Run the queue's FAILED or CANCELLED tasks that ``filters`` select again (the
        task list's filters, plus reason and dry_run): ``{"matched", "retried", "skipped",
        "dry_run", "complete"}``."""
        return self._send(calls.retry_tasks(queue_id, **filters))

    def cancel_tasks(self, queue_id: str, **filters: Any) -> dict[str, Any]:
        """Cancel the queue's PENDING, RUNNING and NEEDS_REVIEW tasks that ``filters`` select
        (the task list's filters, plus reason and dry_run)."""
        return self._send(calls.cancel_tasks(queue_id, **filters))

    def review_tasks(self, queue_id: str, action: str, result: Any = None,
                     **filters: Any) -> dict[str, Any]:
        """Resolve the queue's NEEDS_REVIEW tasks that ``filters`` select alike."""
        return self._send(calls.review_tasks(queue_id, action, result, **filters))

    def pause(self, queue_id: str, reason: str, handler: str | None = None,
              handler_version: str | None = None) -> dict[str, Any]:
        """Pause the queue, a capability or a capability version (no new starts)."""
        return self._send(calls.pause(queue_id, reason, handler, handler_version))

    def resume(self, queue_id: str, handler: str | None = None,
               handler_version: str | None = None, reason: str | None = None
               ) -> dict[str, Any]:
        return self._send(calls.resume(queue_id, handler, handler_version, reason))

    def pauses(self, queue_id: str) -> dict[str, Any]:
        return self._send(calls.pauses(queue_id))

    def review(
        self, task_id: str, action: str, result: Any = None, reason: str | None = None
    ) -> dict[str, Any]:
        return self._send(calls.review(task_id, action, result, reason))

    def list_tasks(self, queue_id: str, **filters: Any) -> dict[str, Any]:
        """One page of the queue's tasks: ``{"tasks": [...], "next_cursor": str | None}``.
        Filters: state (one or several), handler, handler_version, payload_version,
        created_after, created_before, finished_after, finished_before (epoch ms,
        inclusive), order ("newest" or "oldest"), limit (1-500, default 50), cursor."""
        return self._send(calls.list_tasks(queue_id, **filters))

    def iter_tasks(self, queue_id: str, *, max_tasks: int | None = None,
                   **filters: Any) -> Iterator[dict[str, Any]]:
        """Every task the filters select, following the cursors page by page; stops after
        ``max_tasks`` tasks when given, and after MAX_PAGES pages in any case."""
        yielded = 0
        cursor = filters.pop("cursor", None)
        for _ in range(MAX_PAGES):
            page = self.list_tasks(queue_id, cursor=cursor, **filters)
            for task in page["tasks"]:
                if max_tasks is not None and yielded >= max_tasks:
                    return
                yielded += 1
                yield task
            cursor = page.get("next_cursor")
            if not cursor:
                return

    def list_queues(self) -> dict[str, Any]:
        """``{"queues": [{"queue_id", "name", "created_at", "counts"}, ...]}``."""
        return self._send(calls.list_queues())

    def list_workers(self, queue_id: str | None = None) -> dict[str, Any]:
        """``{"workers": [...]}``: live worker instances on every replica."""
        return self._send(calls.list_workers(queue_id))
    # ------------------------------------------------------------------ schedules

    def create_schedule(self, queue_id: str, schedule: Mapping[str, Any]) -> dict[str, Any]:
        """A periodic schedule: {"cron", "timezone"?, "task": spec, "name"?,
        "missed_ticks"?, "paused"?}. ``TaskType.spec(payload)`` builds the task spec;
        ``"workflow"`` (a canvas or a workflow body) instead of ``"task"`` fires a workflow
        each tick, where the server supports it."""
        return self._send(calls.create_schedule(queue_id, with_workflow_body(schedule)))

    def list_schedules(self, queue_id: str) -> list[dict[str, Any]]:
        return list(self._send(calls.list_schedules(queue_id))["schedules"])

    def get_schedule(self, schedule_id: str) -> dict[str, Any]:
        """The schedule with its most recent firings (tick, task, missed)."""
        return self._send(calls.get_schedule(schedule_id))

    def pause_schedule(self, schedule_id: str) -> dict[str, Any]:
        return self._send(calls.pause_schedule(schedule_id))

    def resume_schedule(self, schedule_id: str) -> dict[str, Any]:
        return self._send(calls.resume_schedule(schedule_id))

    def delete_schedule(self, schedule_id: str) -> dict[str, Any]:
        return self._send(calls.delete_schedule(schedule_id))

    # ------------------------------------------------------------------ limits

    def set_limit(self, queue_id: str, pattern: str, *, max_running: int | None = None,
                  rate: tuple[int, int] | None = None) -> dict[str, Any]:
        """Set a flow-control limit (admin): ``pattern`` a key or ``name:*``, ``rate``
        (count, interval_ms)."""
        return self._send(calls.set_limit(queue_id, pattern, max_running, rate))

    def get_limit(self, queue_id: str, pattern: str) -> dict[str, Any]:
        return self._send(calls.get_limit(queue_id, pattern))

    def list_limits(self, queue_id: str) -> list[dict[str, Any]]:
        return list(self._send(calls.list_limits(queue_id))["limits"])

    def delete_limit(self, queue_id: str, pattern: str) -> dict[str, Any]:
        return self._send(calls.delete_limit(queue_id, pattern))

    def set_fair(self, queue_id: str, key: str) -> dict[str, Any]:
        """Fair dispatch between the values of ``key`` (a key name, e.g. customer; admin)."""
        return self._send(calls.set_fair(queue_id, key))

    def fair(self, queue_id: str) -> dict[str, Any]:
        """The queue's fair dispatch setting (``key`` None: not fair) and its changes."""
        return self._send(calls.fair(queue_id))

    def fair_off(self, queue_id: str) -> dict[str, Any]:
        return self._send(calls.fair_off(queue_id))
