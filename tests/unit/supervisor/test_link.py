"""The connection's lifecycle table and clocks alone (link.py; the session's use of them:
test_session.py)."""

from __future__ import annotations

import pytest
from supervisor_session_harness import welcome

from orbit_supervisor.link import CONNS, HELLO_TIMEOUT, Conn, ConnEvent, Link
from orbit_supervisor.machine import IllegalEvent


def test_every_state_has_a_row_and_only_done_ends() -> None:
    assert set(CONNS) == set(Conn)
    assert [state for state, row in CONNS.items() if not row] == [Conn.DONE]
    assert all(row.get(ConnEvent.ENDED) is Conn.DONE for state, row in CONNS.items()
               if state is not Conn.DONE)


def test_a_connection_is_opened_welcomed_resumed_lost_and_opened_again() -> None:
    link = Link(0.2, 5.0, lambda: 1.0)
    for event, state in [(ConnEvent.START, Conn.CONNECTING), (ConnEvent.OPENED, Conn.HELLO_SENT),
                         (ConnEvent.RESUME_SENT, Conn.RESUMING), (ConnEvent.RESUMED, Conn.READY)]:
        assert link.fire(event) is state
    assert link.reconnect_delay() == pytest.approx(0.2) and link.state is Conn.CONNECTING
    assert link.reconnect_delay() == pytest.approx(0.4)  # the backoff grows until a welcome


def test_an_illegal_event_raises_and_changes_nothing() -> None:
    link = Link(0.2, 5.0, lambda: 1.0)
    with pytest.raises(IllegalEvent, match="connection: no OPENED in IDLE"):
        link.fire(ConnEvent.OPENED)  # hello before any Connect
    assert link.state is Conn.IDLE
    link.fire(ConnEvent.ENDED)
    with pytest.raises(IllegalEvent):
        link.fire(ConnEvent.START)  # a finished run never connects again
    assert link.done


def test_a_welcome_resets_the_backoff_and_sets_the_clocks() -> None:
    link = Link(0.2, 5.0, lambda: 1.0)
    link.fire(ConnEvent.START)
    link.reconnect_delay()
    link.fire(ConnEvent.OPENED)
    link.received(1.0)
    assert link.overdue(1.0 + HELLO_TIMEOUT - 1e-6) is None
    assert link.overdue(1.0 + HELLO_TIMEOUT) == "WELCOME_TIMEOUT"
    link.welcomed(welcome(heartbeat_ms=1000, ttl_ms=3000))
    link.fire(ConnEvent.WELCOMED)
    link.sent(2.0)
    link.received(2.0)
    assert link.timers() == [pytest.approx(5.0), pytest.approx(3.0)]
    assert not link.heartbeat_due(2.99) and link.heartbeat_due(3.0)
    assert link.overdue(5.0) == "SERVER_SILENT"
    assert link.reconnect_delay() == pytest.approx(0.2)
