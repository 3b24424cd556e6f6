"""store.retry: which database errors run a transaction again, how often, and what the rest
become. Exceptions are the real ones SQLAlchemy raises around PyMySQL's and sqlite3's."""

from __future__ import annotations

import sqlite3
from typing import Any

import pymysql
import pytest
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError

from orbit_server.store.retry import MAX_TRIES, is_retryable_conflict, transactional
from orbit_wire.errors import ErrorCode, OrbitError


def _mysql(errno: int, *, statement: str | None = "UPDATE tasks SET ...",
           invalidated: bool = False) -> OperationalError:
    orig = pymysql.err.OperationalError(errno, "message from the server")
    return OperationalError(statement, None, orig, connection_invalidated=invalidated)


@transactional
class Counting:
    def __init__(self, failures: list[BaseException]) -> None:
        self.failures = failures
        self.calls = 0

    def run(self) -> str:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return "done"

    def _private(self) -> int:  # not wrapped
        self.calls += 1
        raise _mysql(1213)


@pytest.mark.parametrize("exc", [_mysql(1213), _mysql(1205),
                                 OrbitError(ErrorCode.UNAVAILABLE, "lost a race", retryable=True),
                                 _mysql(2013, invalidated=True)])
def test_conflicts_run_again_until_success(exc: BaseException) -> None:
    svc = Counting([exc, exc])
    assert is_retryable_conflict(exc)
    assert svc.run() == "done" and svc.calls == 3


def test_retries_are_bounded_and_end_in_unavailable() -> None:
    svc = Counting([_mysql(1213) for _ in range(MAX_TRIES + 3)])
    with pytest.raises(OrbitError) as err:
        svc.run()
    assert svc.calls == MAX_TRIES
    assert err.value.code is ErrorCode.UNAVAILABLE and err.value.retryable
    assert "1213" in err.value.message and "UPDATE" not in err.value.message


def test_connection_lost_at_commit_is_not_retried() -> None:
    # COMMIT may have happened: the caller decides (receipts answer a worker's resend).
    svc = Counting([_mysql(2013, statement=None, invalidated=True)])
    with pytest.raises(OrbitError) as err:
        svc.run()
    assert svc.calls == 1 and err.value.code is ErrorCode.UNAVAILABLE


def test_unreachable_database_is_unavailable_at_once() -> None:
    svc = Counting([_mysql(2003, statement=None)])
    with pytest.raises(OrbitError) as err:
        svc.run()
    assert svc.calls == 1 and err.value.code is ErrorCode.UNAVAILABLE and err.value.retryable


def test_sqlite_locked_becomes_unavailable() -> None:
    exc = OperationalError("BEGIN IMMEDIATE", None, sqlite3.OperationalError("database is locked"))
    svc = Counting([exc])
    with pytest.raises(OrbitError) as err:
        svc.run()
    assert svc.calls == 1 and err.value.code is ErrorCode.UNAVAILABLE


@pytest.mark.parametrize("exc", [
    ProgrammingError("SELECT nope", None, pymysql.err.ProgrammingError(1064, "syntax")),
    IntegrityError("INSERT", None, pymysql.err.IntegrityError(1062, "duplicate")),
    OrbitError(ErrorCode.NOT_FOUND, "no such task"),
    OrbitError(ErrorCode.UNAVAILABLE, "not retryable", retryable=False),
])
def test_other_errors_pass_through_untouched(exc: BaseException) -> None:
    svc = Counting([exc])
    with pytest.raises(type(exc)) as err:
        svc.run()
    assert err.value is exc and svc.calls == 1


def test_private_methods_are_not_wrapped() -> None:
    svc: Any = Counting([])
    with pytest.raises(OperationalError):
        svc._private()
    assert svc.calls == 1


@transactional
class Nested:
    def __init__(self) -> None:
        self.inner_calls = 0

    def outer(self) -> str:
        return self.inner()

    def inner(self) -> str:
        self.inner_calls += 1
        raise _mysql(1213)


def test_nested_public_calls_retry_only_at_the_outermost() -> None:
    svc = Nested()
    with pytest.raises(OrbitError):
        svc.outer()
    assert svc.inner_calls == MAX_TRIES  # not MAX_TRIES squared
    svc.inner_calls = 0
    with pytest.raises(OrbitError):
        svc.inner()  # the guard was reset: a later call retries again
    assert svc.inner_calls == MAX_TRIES
