"""Bounded retry of transactions that lost to another writer, and typed database faults.

Every public method of a use-case class (``orbit_server.services``) is one transaction, so a
method that failed before its commit can run again from the start. ``transactional`` wraps a
class's public methods so that:

* a deadlock (MySQL 1213), a lock-wait timeout (1205) or a lost compare-and-set
  (``OrbitError(UNAVAILABLE, retryable=True)`` from ``store.rows``) runs the method again, at
  most ``MAX_TRIES`` times in all, after a short jittered pause;
* a connection lost *during a statement* runs it again once the pool has reconnected (the
  database rolls back a transaction whose connection dies before COMMIT). A connection lost
  *during COMMIT* is never retried: the commit may have happened, and the caller must decide
  (workers resend with the same message ID, which receipts answer once);
* every other operational fault (database unreachable, restarting, locked) becomes
  ``OrbitError(UNAVAILABLE, retryable=True)``: HTTP 503 and the protocol's UNAVAILABLE, which
  clients back off on. The message names the fault, never a parameter or a password.

Programming errors (bad SQL, constraint violations nobody handles) are left alone: they are
bugs, reported as INTERNAL by the adapters.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

from orbit_host.backoff import delays
from orbit_host.logs import fields
from orbit_wire.errors import ErrorCode, OrbitError

__all__ = ["MAX_TRIES", "faults_logged", "is_retryable_conflict", "no_retries",
           "transactional", "translate"]

log = logging.getLogger("orbit.store")

MAX_TRIES = 5
# MySQL/MariaDB server error numbers that mean "rolled back, nothing kept: run it again".
DEADLOCK = 1213
LOCK_WAIT_TIMEOUT = 1205
_CONFLICTS = frozenset({DEADLOCK, LOCK_WAIT_TIMEOUT})
# The pause before try n + 1 is drawn in [0.002, 0.02] x n seconds.
_PAUSE_S = 0.02
_PAUSE_JITTER = 0.9

C = TypeVar("C", bound=type)


@contextlib.contextmanager
def faults_logged(logger: logging.Logger, failed: str, *args: object, event: str,
                  **values: Any) -> Iterator[None]:
    """For background store calls that a later pass retries: swallow what the block raises,
    logging a database fault (``OrbitError``) as one warning line and anything else (a bug)
    with its traceback. ``failed`` is the %-style message, e.g. "reaper pass failed";
    ``event`` and ``values`` are the record's event name and fields."""
    try:
        yield
    except OrbitError as exc:
        logger.warning(f"{failed}: %s", *args, exc.message,
                       extra=fields(event, code=exc.code.value, **values))
    except Exception:
        logger.exception(failed, *args, extra=fields(event, **values))


def _errno(exc: DBAPIError) -> int | None:
    args = getattr(exc.orig, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


def is_retryable_conflict(exc: BaseException) -> bool:
    """True when the transaction was rolled back by a conflict and may simply run again."""
    if isinstance(exc, OrbitError):
        return exc.code is ErrorCode.UNAVAILABLE and exc.retryable
    if isinstance(exc, DBAPIError):
        if _errno(exc) in _CONFLICTS:
            return True
        # Lost mid-statement (not at COMMIT, whose statement is None): nothing was committed.
        return exc.connection_invalidated and exc.statement is not None
    return False


def translate(exc: DBAPIError) -> OrbitError | None:
    """The typed error a database fault becomes, or None for a programming error."""
    if not isinstance(exc, (OperationalError, InterfaceError)) and not exc.connection_invalidated:
        return None
    errno = _errno(exc)
    what = f"database error {errno}" if errno is not None else type(exc.orig).__name__
    return OrbitError(ErrorCode.UNAVAILABLE, f"the database is unavailable ({what}); retry",
                      retryable=True)


# Only the outermost wrapped call of a thread retries: a public method calling another must
# not multiply the tries, nor run again a transaction its callee already translated.
_calls = threading.local()


@contextlib.contextmanager
def no_retries() -> Iterator[None]:
    """Run wrapped methods once, their faults raised as they come (untranslated): for a
    group commit, where a retry must rerun the whole group's calls one by one instead (a
    MySQL deadlock rolls back the whole transaction, not one call's savepoint)."""
    was = getattr(_calls, "active", False)
    _calls.active = True
    try:
        yield
    finally:
        _calls.active = was


def _retrying(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def run(*args: Any, **kwargs: Any) -> Any:
        if getattr(_calls, "active", False):
            return method(*args, **kwargs)
        _calls.active = True
        try:
            return _with_retries(method, args, kwargs)
        finally:
            _calls.active = False

    run.__orbit_transactional__ = True  # type: ignore[attr-defined]
    return run


def _with_retries(method: Callable[..., Any], args: tuple[Any, ...],
                  kwargs: dict[str, Any]) -> Any:
    pauses: Iterator[float] | None = None  # made at the first retry (most calls have none)
    for attempt in range(1, MAX_TRIES + 1):
        try:
            return method(*args, **kwargs)
        except (OrbitError, DBAPIError) as exc:
            last = attempt == MAX_TRIES
            if last or not is_retryable_conflict(exc):
                if isinstance(exc, DBAPIError):
                    typed = translate(exc)
                    if typed is not None:
                        raise typed from exc
                raise
            log.debug("%s: retrying after %s", method.__name__, type(exc).__name__,
                      extra=fields("store_retry", method=method.__name__))
            if pauses is None:
                pauses = delays(_PAUSE_S, _PAUSE_S * MAX_TRIES, growth="linear",
                                jitter=_PAUSE_JITTER, draw=random.random)
            time.sleep(next(pauses))
    raise AssertionError("unreachable")  # pragma: no cover


def transactional(cls: C) -> C:
    """Class decorator: wrap every public method defined on ``cls`` (see module docstring)."""
    for name, value in list(vars(cls).items()):
        if name.startswith("_") or not callable(value) or isinstance(value, type):
            continue
        if isinstance(value, (staticmethod, classmethod)):
            continue
        setattr(cls, name, _retrying(value))
    return cls
