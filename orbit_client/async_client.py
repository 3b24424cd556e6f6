"""The asyncio client: the same API as OrbitClient (client.py), every method a coroutine (an
async iterator where OrbitClient's is an iterator).

HTTP calls go through httpx; submits and waits go over the producer channel
(async_channel.py) when the server offers it, as for the blocking client. httpx, asyncio and
websockets load when the client is made: the ``orbit`` command, which uses the blocking
client only, never loads them.
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Mapping, Sequence
from contextlib import aclosing
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
from .errors import OrbitApiError, certificate_refused, unreachable
from .tasks import Task, TaskTimeout, outcome
from .transport import refused_certificate
from .workflow_handle import AsyncWorkflow, AsyncWorkflowMethods, is_canvas, with_workflow_body

if TYPE_CHECKING:  # httpx and the channel serve AsyncOrbitClient only, and load with it
    import httpx

    from .async_channel import AsyncChannel
    from .channel_link import ChannelRefused

__all__ = ["AsyncOrbitClient"]


def _limits(max_connections: int) -> httpx.Limits:
    import httpx

    check_max_connections(max_connections)
    # Keep every connection alive: closing idle ones only to reopen them costs a handshake.
    return httpx.Limits(
        max_connections=max_connections, max_keepalive_connections=max_connections
    )


def _transport_error(url: str, exc: httpx.HTTPError) -> OrbitApiError:
    """No usable answer. The class name says what went wrong (httpx messages may hold the
    URL, never headers). Connect, read and protocol failures mean the server did not answer;
    anything else httpx raises (e.g. a redirect loop) is not the server being down."""
    import httpx

    refused = refused_certificate(exc)
    if refused is not None:
        return certificate_refused(url, refused)
    if isinstance(exc, httpx.TransportError):
        return unreachable(url, type(exc).__name__)
    return OrbitApiError("INTERNAL", f"request to {url} failed: {type(exc).__name__}",
                         retryable=False)


class AsyncOrbitClient(AsyncWorkflowMethods, ClientBase):
    """The same API as OrbitClient for asyncio code; every method is a coroutine."""

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
        import httpx

        verified = verify_for(verify, ca_file)
        self._http = httpx.AsyncClient(
            base_url=self.url, headers=self._headers, verify=verified,
            limits=_limits(max_connections),
        )
        # Requests beyond the pool size wait here, not in httpx's pool: there they would count
        # against the pool timeout (a burst of 500 submits failed with PoolTimeout, which is
        # not an unreachable server), and its wait list costs time on every hand-over.
        import asyncio  # here: the `orbit` command (blocking client only) skips loading it

        self._slots = asyncio.Semaphore(max_connections)
        self._tls = self._channel_tls(verified)
        self._channel: AsyncChannel | None = None

    async def __aenter__(self) -> AsyncOrbitClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        channel, self._channel = self._channel, None
        if channel is not None:
            await channel.aclose()
        await self._http.aclose()

    async def _send(self, call: calls.Call) -> dict[str, Any]:
        import httpx  # loaded by __init__ already: a dictionary lookup

        try:
            async with self._slots:
                response = await self._http.request(
                    call.method, call.path, params=call.params, content=call.body,
                    timeout=httpx.Timeout(self._timeout, read=self._read_timeout(call)))
        except httpx.HTTPError as exc:
            raise _transport_error(self.url, exc) from None
        return calls.decode(call, response.status_code, response.content)

    # ------------------------------------------------------------------ the channel

    def _open_channel(self) -> AsyncChannel | None:
        """As OrbitClient._open_channel."""
        if not self._channel_wanted:
            return None
        if self._channel is None:
            from .async_channel import AsyncChannel

            self._channel = AsyncChannel(self.url, self._headers, self._tls, self._timeout)
        return self._channel

    def _refused(self, refusal: ChannelRefused) -> None:
        if refusal.for_good:
            self._channel_wanted = False

    async def _submit_all(self, queue_id: str, specs: Sequence[Mapping[str, Any]],
                          batch: bool) -> list[dict[str, Any]]:
        """As OrbitClient._submit_all."""
        channel = self._open_channel()
        if channel is not None:
            from .channel_link import ChannelRefused

            specs, texts = self._channel_texts(specs, batch)
            try:
                if self._fits_channel(texts):
                    return await channel.submit(calls.queue_ref(queue_id), texts)
            except ChannelRefused as refusal:
                self._refused(refusal)  # the keyed specs go over HTTP: still applied once
        if batch:
            return calls.tasks_of(await self._send(calls.submit_batch(queue_id, specs)))
        return [await self._send(calls.submit(queue_id, specs[0]))]

    async def _pushed(self, task_ids: list[str], deadline: float
                      ) -> AsyncGenerator[tuple[str, dict[str, Any]], None]:
        """As OrbitClient._pushed."""
        channel = self._open_channel()
        if channel is None or deadline <= time.monotonic():
            return
        from .channel_link import ChannelRefused

        # Closed at once when the caller stops early: its wait ends with it.
        settled = channel.settled(task_ids, deadline - time.monotonic())
        try:
            async with aclosing(settled):
                async for task_id, view in settled:
                    if view is not None:  # else unknown there: HTTP says why
                        yield task_id, view
        except ChannelRefused as refusal:
            self._refused(refusal)

    async def _poll(self, task_id: str, deadline: float) -> dict[str, Any]:
        """As OrbitClient._poll."""
        task = await self._send(calls.get_task(task_id))
        for _ in range(MAX_WAIT_ROUNDS):
            left_ms = int((deadline - time.monotonic()) * 1000)
            if is_settled(task) or left_ms <= 0:
                break
            task = await self._send(calls.get_task(task_id, min(left_ms, calls.MAX_WAIT_MS)))
        return task

    async def health(self) -> dict[str, Any]:
        return await self._send(calls.health())

    async def create_queue(self, name: str | None = None) -> dict[str, Any]:
        return await self._send(calls.create_queue(name))

    async def queue_stats(self, queue_id: str) -> dict[str, Any]:
        return await self._send(calls.queue_stats(queue_id))

    async def capabilities(self, queue_id: str) -> dict[str, Any]:
        """The queue's registered capabilities, each with its declared policy."""
        return await self._send(calls.capabilities(queue_id))

    async def create_credential(
        self,
        role: str,
        queues: Sequence[str] = (),
        name: str | None = None,
        *,
        path: str | os.PathLike[str] | None = None,
        expires_at_ms: int | None = None,
    ) -> Credentials:
        """As OrbitClient.create_credential."""
        return self._new_credentials(await self._send(calls.create_credential(
            role, queues, name, expires_at_ms)), path)

    async def list_credentials(self) -> list[dict[str, Any]]:
        """Every credential, without secrets (admin)."""
        return list((await self._send(calls.list_credentials()))["credentials"])

    async def rotate_credential(self, credential_id: str, grace_ms: int = 0, *,
                                path: str | os.PathLike[str] | None = None,
                                expires_at_ms: int | None = None) -> Credentials:
        """As OrbitClient.rotate_credential."""
        return self._new_credentials(await self._send(calls.rotate_credential(
            credential_id, grace_ms, expires_at_ms)), path)

    async def revoke_credential(self, credential_id: str) -> dict[str, Any]:
        return await self._send(calls.revoke_credential(credential_id))

    @overload
    async def submit(self, target: Canvas, *, queue: str | None = None, name: str | None = None,
               operation_key: str | None = None) -> AsyncWorkflow: ...

    @overload
    async def submit(self, target: Signature[Any, R], *, queue: str | None = None
               ) -> Task[R]: ...

    @overload
    async def submit(self, target: str, payload: Mapping[str, Any]) -> dict[str, Any]: ...

    @overload
    async def submit(self, target: TaskType[P, R], payload: P, *, queue: str | None = None,
                     idempotent: bool | None = None, operation_key: str | None = None,
                     priority: int | None = None, delay_ms: int | None = None,
                     not_before: NotBefore = None, **policy: Any) -> Task[R]: ...

    async def submit(self, target: Any, payload: Any = None, *, queue: str | None = None,
                     not_before: NotBefore = None, **options: Any) -> Any:
        """As OrbitClient.submit."""
        if is_canvas(target):
            return await self.submit_workflow(target, queue=queue, **options)
        if isinstance(target, Signature):
            target, payload, options = target.task_type, target.payload, {**target.options,
                                                                          **options}
        if isinstance(target, str):
            spec = self._dict_submit(payload, queue, not_before, options)
            return (await self._submit_all(target, [spec], batch=False))[0]
        queue_id, typed = self._typed_submit(target, payload, queue, not_before, options)
        return Task.from_view((await self._submit_all(queue_id, [typed], batch=False))[0])

    async def task(self, task_id: str) -> Task[Any]:
        """The task now, typed."""
        return Task.from_view(await self.get_task(task_id))

    @overload
    async def result(self, task: Task[R], timeout: float) -> R: ...

    @overload
    async def result(self, task: str, timeout: float) -> Any: ...

    async def result(self, task: Task[Any] | str, timeout: float) -> Any:
        """As OrbitClient.result."""
        return outcome(Task.from_view(await self.wait(task, timeout)), timeout)

    async def submit_batch(
        self, queue_id: str, specs: Sequence[Mapping[str, Any]]
    ) -> list[dict[str, Any]]:
        """As OrbitClient.submit_batch."""
        return await self._submit_all(queue_id, specs, batch=True)

    async def get_task(self, task_id: str, wait_ms: int | None = None) -> dict[str, Any]:
        """The task now, or (with ``wait_ms`` ≤ 60000) once settled or when the wait ends."""
        call = calls.get_task(task_id, wait_ms)
        if not wait_ms:
            return await self._send(call)
        deadline = time.monotonic() + wait_ms / 1000
        async with aclosing(self._pushed([task_id], deadline)) as pushed:
            async for _, view in pushed:
                return view
        left_ms = int((deadline - time.monotonic()) * 1000)
        return await self._send(calls.get_task(task_id, left_ms if left_ms > 0 else None))

    # A str is also an Iterable[str]: this first overload wins for it, as meant.
    @overload
    async def wait(  # type: ignore[overload-overlap]
            self, tasks: OneTask, timeout: float) -> dict[str, Any]: ...

    @overload
    async def wait(self, tasks: Iterable[OneTask], timeout: float) -> list[dict[str, Any]]: ...

    async def wait(self, tasks: OneTask | Iterable[OneTask], timeout: float) -> Any:
        """As OrbitClient.wait."""
        ids, one = self._task_ids(tasks)
        deadline = time.monotonic() + timeout
        views = {task_id: view async for task_id, view
                 in self._pushed(list(dict.fromkeys(ids)), deadline)}
        for task_id in ids:
            if task_id not in views:
                views[task_id] = await self._poll(task_id, deadline)
        return views[ids[0]] if one else [views[task_id] for task_id in ids]

    async def as_completed(self, tasks: Iterable[OneTask], timeout: float
                           ) -> AsyncIterator[dict[str, Any]]:
        """As OrbitClient.as_completed: ``async for view in orbit.as_completed(...)``."""
        ids, _ = self._task_ids(tasks)
        left = dict.fromkeys(ids)
        deadline = time.monotonic() + timeout
        async with aclosing(self._pushed(list(left), deadline)) as pushed:
            async for task_id, view in pushed:
                del left[task_id]
                yield view
        order = list(left)
        for index, task_id in enumerate(order):
            view = await self._poll(task_id, deadline)
            if not is_settled(view):
                raise TaskTimeout(Task.from_view(view), timeout, tuple(order[index:]))
            yield view

    async def cancel(self, task_id: str, reason: str | None = None) -> dict[str, Any]:
        return await self._send(calls.cancel(task_id, reason))

    async def attempts(self, task_id: str) -> dict[str, Any]:
        return await self._send(calls.attempts(task_id))

    async def audit(self, task_id: str) -> dict[str, Any]:
        return await self._send(calls.audit(task_id))

    async def retry(self, task_id: str, reason: str | None = None) -> dict[str, Any]:
        """Run a FAILED or CANCELLED task again; its view (CONFLICT in another state)."""
        return await self._send(calls.retry(task_id, reason))

    async def retry_tasks(self, queue_id: str, **filters: Any) -> dict[str, Any]:
        """Run the queue's FAILED or CANCELLED tasks that ``filters`` select again (the
        task list's filters, plus reason and dry_run): ``{"matched", "retried", "skipped",
        "dry_run", "complete"}``."""
        return await self._send(calls.retry_tasks(queue_id, **filters))

    async def cancel_tasks(self, queue_id: str, **filters: Any) -> dict[str, Any]:
        """Cancel the queue's PENDING, RUNNING and NEEDS_REVIEW tasks that ``filters`` select
        (the task list's filters, plus reason and dry_run)."""
        return await self._send(calls.cancel_tasks(queue_id, **filters))

    async def review_tasks(self, queue_id: str, action: str, result: Any = None,
                           **filters: Any) -> dict[str, Any]:
        """Resolve the queue's NEEDS_REVIEW tasks that ``filters`` select alike."""
        return await self._send(calls.review_tasks(queue_id, action, result, **filters))

    async def pause(self, queue_id: str, reason: str, handler: str | None = None,
                    handler_version: str | None = None) -> dict[str, Any]:
        """Pause the queue, a capability or a capability version (no new starts)."""
        return await self._send(calls.pause(queue_id, reason, handler, handler_version))

    async def resume(self, queue_id: str, handler: str | None = None,
                     handler_version: str | None = None, reason: str | None = None
                     ) -> dict[str, Any]:
        return await self._send(calls.resume(queue_id, handler, handler_version, reason))

    async def pauses(self, queue_id: str) -> dict[str, Any]:
        return await self._send(calls.pauses(queue_id))

    async def review(
        self, task_id: str, action: str, result: Any = None, reason: str | None = None
    ) -> dict[str, Any]:
        return await self._send(calls.review(task_id, action, result, reason))

    async def list_tasks(self, queue_id: str, **filters: Any) -> dict[str, Any]:
        return await self._send(calls.list_tasks(queue_id, **filters))

    async def iter_tasks(self, queue_id: str, *, max_tasks: int | None = None,
                         **filters: Any) -> AsyncIterator[dict[str, Any]]:
        yielded = 0
        cursor = filters.pop("cursor", None)
        for _ in range(MAX_PAGES):
            page = await self.list_tasks(queue_id, cursor=cursor, **filters)
            for task in page["tasks"]:
                if max_tasks is not None and yielded >= max_tasks:
                    return
                yielded += 1
                yield task
            cursor = page.get("next_cursor")
            if not cursor:
                return

    async def list_queues(self) -> dict[str, Any]:
        return await self._send(calls.list_queues())

    async def list_workers(self, queue_id: str | None = None) -> dict[str, Any]:
        return await self._send(calls.list_workers(queue_id))
    # ------------------------------------------------------------------ schedules

    async def create_schedule(self, queue_id: str,
                              schedule: Mapping[str, Any]) -> dict[str, Any]:
        return await self._send(calls.create_schedule(queue_id, with_workflow_body(schedule)))

    async def list_schedules(self, queue_id: str) -> list[dict[str, Any]]:
        return list((await self._send(calls.list_schedules(queue_id)))["schedules"])

    async def get_schedule(self, schedule_id: str) -> dict[str, Any]:
        return await self._send(calls.get_schedule(schedule_id))

    async def pause_schedule(self, schedule_id: str) -> dict[str, Any]:
        return await self._send(calls.pause_schedule(schedule_id))

    async def resume_schedule(self, schedule_id: str) -> dict[str, Any]:
        return await self._send(calls.resume_schedule(schedule_id))

    async def delete_schedule(self, schedule_id: str) -> dict[str, Any]:
        return await self._send(calls.delete_schedule(schedule_id))

    # ------------------------------------------------------------------ limits

    async def set_limit(self, queue_id: str, pattern: str, *, max_running: int | None = None,
                        rate: tuple[int, int] | None = None) -> dict[str, Any]:
        """Set a flow-control limit (admin): ``pattern`` a key or ``name:*``, ``rate``
        (count, interval_ms)."""
        return await self._send(calls.set_limit(queue_id, pattern, max_running, rate))

    async def get_limit(self, queue_id: str, pattern: str) -> dict[str, Any]:
        return await self._send(calls.get_limit(queue_id, pattern))

    async def list_limits(self, queue_id: str) -> list[dict[str, Any]]:
        return list((await self._send(calls.list_limits(queue_id)))["limits"])

    async def delete_limit(self, queue_id: str, pattern: str) -> dict[str, Any]:
        return await self._send(calls.delete_limit(queue_id, pattern))

    async def set_fair(self, queue_id: str, key: str) -> dict[str, Any]:
        """Fair dispatch between the values of ``key`` (a key name, e.g. customer; admin)."""
        return await self._send(calls.set_fair(queue_id, key))

    async def fair(self, queue_id: str) -> dict[str, Any]:
        """The queue's fair dispatch setting (``key`` None: not fair) and its changes."""
        return await self._send(calls.fair(queue_id))

    async def fair_off(self, queue_id: str) -> dict[str, Any]:
        return await self._send(calls.fair_off(queue_id))
