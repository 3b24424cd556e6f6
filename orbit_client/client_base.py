"""What the blocking and the asyncio clients share: where to connect and with which
credential, the typed submit's spec, the task IDs a wait takes, and when the producer
channel serves (docs/producers.md "The producer channel").

The channel is used when ``channel=True`` (the default) and the client has a credential: it
opens on the first submit or wait. If the server refuses it (an older server answers the
upgrade 403 or 404), the client uses HTTP from then on; a refusal that may pass (429, 5xx)
sends that one call over HTTP. Submits over the channel carry an operation key the client
makes when the spec has none.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

from orbit_host.credentials import Credentials, load_credentials, write_credentials
from orbit_host.tls import ca_file_from, client_ssl_context
from orbit_wire.limits import MAX_FRAME_BYTES
from orbit_wire.model import TaskState
from orbit_wire.tasktype import TaskType

from . import calls
from .errors import OrbitApiError
from .tasks import Task
from .transport import ssl_context_for

P = TypeVar("P")
R = TypeVar("R")
# When a typed submit may run: an aware datetime, or ms since the epoch.
NotBefore = datetime | int | None
# What a wait takes: a task (its ID or the Task), or several.
OneTask = str | Task[Any]

# Reading the task again after NEEDS_REVIEW or a terminal state is pointless.
_SETTLED = frozenset(state.value for state in TaskState if state.settled)
# The long poll is held by the server; leave headroom before the client gives up reading.
WAIT_SLACK_S = 10.0
MAX_WAIT_ROUNDS = 100_000  # hard bound on long-poll rounds whatever the clock does
DEFAULT_MAX_CONNECTIONS = 32
MAX_PAGES = 100_000  # hard bound on the pages iter_tasks follows
# The bytes of a submit frame around its specs (type, id, queue ID, watch), and then some.
_SUBMIT_FRAME_BYTES = 200

CredentialsArg = Credentials | str | os.PathLike[str] | None


def is_settled(task: Mapping[str, Any]) -> bool:
    """True once the task is terminal or waits for an operator (NEEDS_REVIEW)."""
    return task.get("state") in _SETTLED


class ClientBase:
    """Configuration shared by both clients: where to connect and with which credential."""

    def __init__(self, url: str | None, credentials: CredentialsArg, timeout: float,
                 queue: str | None, channel: bool) -> None:
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
        # The channel needs a credential: the upgrade carries the bearer.
        self._channel_wanted = channel and creds is not None

    def __repr__(self) -> str:
        who = self.credentials.credential_id if self.credentials is not None else None
        return f"{type(self).__name__}(url={self.url!r}, credential_id={who!r})"

    def _read_timeout(self, call: calls.Call) -> float:
        return self._timeout + (call.wait_ms / 1000 + WAIT_SLACK_S if call.wait_ms else 0.0)

    def _channel_tls(self, verify: bool | str | ssl.SSLContext) -> ssl.SSLContext | None:
        """The TLS context of a ``wss://`` channel: the HTTP client's trust."""
        return ssl_context_for(verify) if self.url.startswith("https://") else None

    @staticmethod
    def _channel_texts(specs: Sequence[Mapping[str, Any]], batch: bool
                       ) -> tuple[list[Mapping[str, Any]], list[bytes]]:
        """The specs with their operation keys, and their JSON texts (checked as HTTP
        checks them)."""
        from .channel_link import keyed_specs

        keyed = keyed_specs(specs)
        return keyed, (calls.batch_json(keyed) if batch else [calls.spec_json(keyed[0])])

    @staticmethod
    def _fits_channel(texts: Sequence[bytes]) -> bool:
        """Whether a submit of these specs fits in one frame the server reads; a larger batch
        goes over HTTP, whose bound on a batch's body is higher."""
        return sum(map(len, texts)) + len(texts) + _SUBMIT_FRAME_BYTES <= MAX_FRAME_BYTES

    @staticmethod
    def _task_ids(tasks: OneTask | Iterable[OneTask]) -> tuple[list[str], bool]:
        """The IDs of a wait's tasks (checked), and whether one task was given."""
        if isinstance(tasks, str | Task):
            return [_task_id(tasks)], True
        return [_task_id(task) for task in tasks], False

    @staticmethod
    def _dict_submit(payload: Any, queue: str | None, not_before: NotBefore,
                     options: dict[str, Any]) -> Mapping[str, Any]:
        if options or queue is not None or not_before is not None:
            raise OrbitApiError("BAD_REQUEST", "submit(queue_id, spec) takes no options; "
                                "put them in the spec")
        return payload  # type: ignore[no-any-return]  # the spec dict, checked when encoded

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


def check_max_connections(max_connections: int) -> int:
    if not 1 <= max_connections <= 1000:
        raise OrbitApiError("BAD_REQUEST", "max_connections must be 1 to 1000")
    return max_connections


def verify_for(verify: bool | str, ca_file: str | None) -> bool | str | ssl.SSLContext:
    """``ca_file`` (else ORBIT_CA_FILE) as the trust for the server's certificate."""
    ca = ca_file_from(ca_file)
    if ca is None or verify is False:
        return verify
    return client_ssl_context(ca)


def _task_id(task: OneTask) -> str:
    return calls.task_ref(task if isinstance(task, str) else task.id)
