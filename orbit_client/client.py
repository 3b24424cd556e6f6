"""Producer and operator clients for the Orbit HTTP API (docs/http-api.md).

``OrbitClient`` (blocking) and ``AsyncOrbitClient`` (asyncio) have the same methods; both send
the Calls of calls.py over keep-alive connections (the blocking one through transport.py,
the asyncio one through httpx) and raise OrbitApiError for every failure (ServerUnreachable
when no answer came). Close them (or use ``with`` /
``async with``) to release the connections.

Two ways to submit (docs/producers.md): ``submit(task_type, payload, ...)`` with a shared
``TaskType`` answers a typed ``Task`` and ``result(task, timeout=...)`` its result or a
typed error (tasks.py); ``submit(queue_id, spec_dict)`` and ``wait`` are the dict API.

No call is retried automatically: a request that got no answer may still have been applied
(a submit without an ``operation_key`` could then create a second task). Retry on
``exc.retryable`` yourself; give submits an operation key to make that safe.

The bearer secret is held in the Authorization header only; it never appears in a repr, an
error message or a log line written by this module.
"""

from __future__ import annotations

import os
import ssl
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar, overload

from orbit_host.credentials import Credentials, load_credentials, write_credentials
from orbit_host.tls import ca_file_from, client_ssl_context
from orbit_wire.model import TaskState
from orbit_wire.tasktype import TaskType

from . import calls
from .errors import CertificateError, OrbitApiError, ServerUnreachable
from .tasks import Task, outcome
from .transport import BlockingTransport, CertificateRefused, NoAnswer, refused_certificate

if TYPE_CHECKING:  # httpx serves AsyncOrbitClient only, and loads with it
    import httpx

P = TypeVar("P")
R = TypeVar("R")
# When a typed submit may run: an aware datetime, or ms since the epoch.
NotBefore = datetime | int | None

# Reading the task again after NEEDS_REVIEW or a terminal state is pointless.
_SETTLED = frozenset(state.value for state in TaskState if state.settled)
# The long poll is held by the server; leave headroom before the client gives up reading.
_WAIT_SLACK_S = 10.0
_MAX_WAIT_ROUNDS = 100_000  # hard bound on long-poll rounds whatever the clock does
DEFAULT_MAX_CONNECTIONS = 32
_MAX_PAGES = 100_000  # hard bound on the pages iter_tasks follows

CredentialsArg = Credentials | str | os.PathLike[str] | None


def is_settled(task: Mapping[str, Any]) -> bool:
    """True once the task is terminal or waits for an operator (NEEDS_REVIEW)."""
    return task.get("state") in _SETTLED


class _Base:
    """Configuration shared by both clients: where to connect and with which credential."""

    def __init__(self, url: str | None, credentials: CredentialsArg, timeout: float,
                 queue: str | None = None):
        creds = (
            load_credentials(credentials)
            if isinstance(credentials, str | os.PathLike)
            else credentials
        )
        base = url or (creds.url if creds is not None else None)
        if not base:
            raise OrbitApiError("BAD_REQUEST", "no server URL: pass url or a credentials file")
        if not base.startswith(("http://", "https://")):
            raise OrbitApiError("BAD_REQUEST", f"server URL must be http(s)://, not {base!r}")
        if timeout <= 0:
            raise OrbitApiError("BAD_REQUEST", "timeout must be positive")
        self.url = base.rstrip("/")
        self.credentials = creds
        # Where typed submits go unless they name a queue: ``queue``, else the credential's
        # only queue.
        self.queue = queue
        self._timeout = timeout
        self._headers = {"Accept": "application/json", "Content-Type": "application/json"}
        if creds is not None:
            self._headers["Authorization"] = f"Bearer {creds.bearer}"

    def __repr__(self) -> str:
        who = self.credentials.credential_id if self.credentials is not None else None
        return f"{type(self).__name__}(url={self.url!r}, credential_id={who!r})"

    def _read_timeout(self, call: calls.Call) -> float:
        return self._timeout + (call.wait_ms / 1000 + _WAIT_SLACK_S if call.wait_ms else 0.0)

    def _typed_submit(self, task_type: TaskType[Any, Any], payload: Any, queue: str | None,
                      not_before: NotBefore, options: dict[str, Any]
                      ) -> tuple[str, dict[str, Any]]:
        """The queue and the TaskSpec dict of a typed submit."""
        if not isinstance(task_type, TaskType):
            raise OrbitApiError("BAD_REQUEST", "submit takes a TaskType and a payload, or a "
                                "queue ID and a spec dict")
        if isinstance(not_before, datetime):
            if not_before.tzinfo is None:
                raise OrbitApiError("BAD_REQUEST", "not_before must be a datetime with a "
                                    "time zone (or ms since the epoch)")
            not_before = int(not_before.timestamp() * 1000)
        try:
            spec = task_type.spec(payload, not_before_at_ms=not_before, **options)
        except OrbitApiError:
            raise
        except Exception as exc:  # an OrbitError of the declaration, as an API error
            code = getattr(exc, "code", "BAD_REQUEST")
            raise OrbitApiError(code, str(getattr(exc, "message", exc))) from None
        return self._queue_for(queue), spec

    def _queue_for(self, queue: str | None) -> str:
        chosen = queue or self.queue
        if chosen is None and self.credentials is not None and len(self.credentials.queues) == 1:
            chosen = self.credentials.queues[0]
        if chosen is None:
            raise OrbitApiError("BAD_REQUEST", "which queue? pass queue= to submit or to the "
                                "client (the credential is not scoped to exactly one queue)")
        return chosen

    def _new_credentials(self, answer: Mapping[str, Any],
                         path: str | os.PathLike[str] | None) -> Credentials:
        """The credentials of a create or rotate answer; with ``path`` also written there as a
        credentials file (mode 0600)."""
        fields = (answer.get("credential_id"), answer.get("secret"), answer.get("role"))
        queues = answer.get("queues") or []
        if not all(isinstance(f, str) and f for f in fields) or not isinstance(queues, list):
            raise OrbitApiError("INTERNAL", "the server's credential answer is incomplete")
        cid, secret, role = (str(f) for f in fields)
        creds = Credentials(self.url, cid, secret, role, tuple(str(q) for q in queues))
        if path is not None:
            write_credentials(path, creds)
        return creds


def _check_max_connections(max_connections: int) -> int:
    if not 1 <= max_connections <= 1000:
        raise OrbitApiError("BAD_REQUEST", "max_connections must be 1 to 1000")
    return max_connections


def _limits(max_connections: int) -> httpx.Limits:
    import httpx

    _check_max_connections(max_connections)
    # Keep every connection alive: closing idle ones only to reopen them costs a handshake.
    return httpx.Limits(
        max_connections=max_connections, max_keepalive_connections=max_connections
    )


def _verify(verify: bool | str, ca_file: str | None) -> bool | str | ssl.SSLContext:
    """``ca_file`` (else ORBIT_CA_FILE) as the trust for the server's certificate."""
    ca = ca_file_from(ca_file)
    if ca is None or verify is False:
        return verify
    return client_ssl_context(ca)


def _refused(url: str, reason: str) -> CertificateError:
    return CertificateError(f"the TLS certificate of {url} was refused: {reason}")


def _unreachable(url: str, kind: str) -> ServerUnreachable:
    return ServerUnreachable(f"no answer from {url}: {kind}")


def _transport_error(url: str, exc: httpx.HTTPError) -> OrbitApiError:
    """No usable answer. The class name says what went wrong (httpx messages may hold the
    URL, never headers). Connect, read and protocol failures mean the server did not answer;
    anything else httpx raises (e.g. a redirect loop) is not the server being down."""
    import httpx

    refused = refused_certificate(exc)
    if refused is not None:
        return _refused(url, refused)
    if isinstance(exc, httpx.TransportError):
        return _unreachable(url, type(exc).__name__)
    return OrbitApiError("INTERNAL", f"request to {url} failed: {type(exc).__name__}",
                         retryable=False)


class OrbitClient(_Base):
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
    ):
        super().__init__(url, credentials, timeout, queue)
        # Threads sharing this client wait there for a free connection, never against a
        # timeout (a request that merely waited its turn must not look like a dead server).
        self._http = BlockingTransport(self.url, self._headers,
                                       _check_max_connections(max_connections), timeout,
                                       _verify(verify, ca_file))

    def __enter__(self) -> OrbitClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, call: calls.Call) -> dict[str, Any]:
        try:
            answer = self._http.request(call.method, call.path, call.params, call.body,
                                        self._read_timeout(call))
        except CertificateRefused as exc:
            raise _refused(self.url, str(exc)) from None
        except NoAnswer as exc:
            raise _unreachable(self.url, exc.kind) from None
        return calls.decode(call, answer.status, answer.body)

    def health(self) -> dict[str, Any]:
        return self._send(calls.health())

    def create_queue(self, name: str | None = None) -> dict[str, Any]:
        return self._send(calls.create_queue(name))

    def queue_stats(self, queue_id: str) -> dict[str, Any]:
        return self._send(calls.queue_stats(queue_id))

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
    def submit(self, target: str, payload: Mapping[str, Any]) -> dict[str, Any]: ...

    @overload
    def submit(self, target: TaskType[P, R], payload: P, *, queue: str | None = None,
               idempotent: bool | None = None, operation_key: str | None = None,
               priority: int | None = None, delay_ms: int | None = None,
               not_before: NotBefore = None, **policy: Any) -> Task[R]: ...

    def submit(self, target: Any, payload: Any, *, queue: str | None = None,
               not_before: NotBefore = None, **options: Any) -> Any:
        """``submit(task_type, payload, ...)``: one task of the declared type, as a typed
        ``Task`` (``queue`` defaults to the client's, then the credential's only queue;
        ``options`` are TaskType.spec's). ``submit(queue_id, spec)``: the dict API."""
        if isinstance(target, str):
            if options or queue is not None or not_before is not None:
                raise OrbitApiError("BAD_REQUEST", "submit(queue_id, spec) takes no options; "
                                    "put them in the spec")
            return self._send(calls.submit(target, payload))
        queue_id, spec = self._typed_submit(target, payload, queue, not_before, options)
        return Task.from_view(self._send(calls.submit(queue_id, spec)))

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
        task_id = task if isinstance(task, str) else task.id
        return outcome(Task.from_view(self.wait(task_id, timeout)), timeout)

    def submit_batch(
        self, queue_id: str, specs: Sequence[Mapping[str, Any]]
    ) -> list[dict[str, Any]]:
        return calls.tasks_of(self._send(calls.submit_batch(queue_id, specs)))

    def get_task(self, task_id: str, wait_ms: int | None = None) -> dict[str, Any]:
        """The task now, or (with ``wait_ms`` ≤ 60000) once settled or when the wait ends."""
        return self._send(calls.get_task(task_id, wait_ms))

    def wait(self, task_id: str, timeout: float) -> dict[str, Any]:
        """Long-poll until the task is settled or ``timeout`` seconds passed; return it."""
        deadline = time.monotonic() + timeout
        task = self.get_task(task_id)
        for _ in range(_MAX_WAIT_ROUNDS):
            left_ms = int((deadline - time.monotonic()) * 1000)
            if is_settled(task) or left_ms <= 0:
                break
            task = self.get_task(task_id, wait_ms=min(left_ms, calls.MAX_WAIT_MS))
        return task

    def cancel(self, task_id: str, reason: str | None = None) -> dict[str, Any]:
        return self._send(calls.cancel(task_id, reason))

    def attempts(self, task_id: str) -> dict[str, Any]:
        return self._send(calls.attempts(task_id))

    def audit(self, task_id: str) -> dict[str, Any]:
        return self._send(calls.audit(task_id))

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
        ``max_tasks`` tasks when given, and after _MAX_PAGES pages in any case."""
        yielded = 0
        cursor = filters.pop("cursor", None)
        for _ in range(_MAX_PAGES):
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
        "missed_ticks"?, "paused"?}. ``TaskType.spec(payload)`` builds the task spec."""
        return self._send(calls.create_schedule(queue_id, schedule))

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


class AsyncOrbitClient(_Base):
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
    ):
        super().__init__(url, credentials, timeout, queue)
        import httpx

        self._http = httpx.AsyncClient(
            base_url=self.url, headers=self._headers, verify=_verify(verify, ca_file),
            limits=_limits(max_connections),
        )
        # Requests beyond the pool size wait here, not in httpx's pool: there they would count
        # against the pool timeout (a burst of 500 submits failed with PoolTimeout, which is
        # not an unreachable server), and its wait list costs time on every hand-over.
        import asyncio  # here: the `orbit` command (blocking client only) skips loading it

        self._slots = asyncio.Semaphore(max_connections)

    async def __aenter__(self) -> AsyncOrbitClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
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

    async def health(self) -> dict[str, Any]:
        return await self._send(calls.health())

    async def create_queue(self, name: str | None = None) -> dict[str, Any]:
        return await self._send(calls.create_queue(name))

    async def queue_stats(self, queue_id: str) -> dict[str, Any]:
        return await self._send(calls.queue_stats(queue_id))

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
    async def submit(self, target: str, payload: Mapping[str, Any]) -> dict[str, Any]: ...

    @overload
    async def submit(self, target: TaskType[P, R], payload: P, *, queue: str | None = None,
                     idempotent: bool | None = None, operation_key: str | None = None,
                     priority: int | None = None, delay_ms: int | None = None,
                     not_before: NotBefore = None, **policy: Any) -> Task[R]: ...

    async def submit(self, target: Any, payload: Any, *, queue: str | None = None,
                     not_before: NotBefore = None, **options: Any) -> Any:
        """As OrbitClient.submit."""
        if isinstance(target, str):
            if options or queue is not None or not_before is not None:
                raise OrbitApiError("BAD_REQUEST", "submit(queue_id, spec) takes no options; "
                                    "put them in the spec")
            return await self._send(calls.submit(target, payload))
        queue_id, spec = self._typed_submit(target, payload, queue, not_before, options)
        return Task.from_view(await self._send(calls.submit(queue_id, spec)))

    async def task(self, task_id: str) -> Task[Any]:
        """The task now, typed."""
        return Task.from_view(await self.get_task(task_id))

    @overload
    async def result(self, task: Task[R], timeout: float) -> R: ...

    @overload
    async def result(self, task: str, timeout: float) -> Any: ...

    async def result(self, task: Task[Any] | str, timeout: float) -> Any:
        """As OrbitClient.result."""
        task_id = task if isinstance(task, str) else task.id
        return outcome(Task.from_view(await self.wait(task_id, timeout)), timeout)

    async def submit_batch(
        self, queue_id: str, specs: Sequence[Mapping[str, Any]]
    ) -> list[dict[str, Any]]:
        return calls.tasks_of(await self._send(calls.submit_batch(queue_id, specs)))

    async def get_task(self, task_id: str, wait_ms: int | None = None) -> dict[str, Any]:
        """The task now, or (with ``wait_ms`` ≤ 60000) once settled or when the wait ends."""
        return await self._send(calls.get_task(task_id, wait_ms))

    async def wait(self, task_id: str, timeout: float) -> dict[str, Any]:
        """Long-poll until the task is settled or ``timeout`` seconds passed; return it."""
        import asyncio

        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        task = await self.get_task(task_id)
        for _ in range(_MAX_WAIT_ROUNDS):
            left_ms = int((deadline - loop.time()) * 1000)
            if is_settled(task) or left_ms <= 0:
                break
            task = await self.get_task(task_id, wait_ms=min(left_ms, calls.MAX_WAIT_MS))
        return task

    async def cancel(self, task_id: str, reason: str | None = None) -> dict[str, Any]:
        return await self._send(calls.cancel(task_id, reason))

    async def attempts(self, task_id: str) -> dict[str, Any]:
        return await self._send(calls.attempts(task_id))

    async def audit(self, task_id: str) -> dict[str, Any]:
        return await self._send(calls.audit(task_id))

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
        for _ in range(_MAX_PAGES):
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
        return await self._send(calls.create_schedule(queue_id, schedule))

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
