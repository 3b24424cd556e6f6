"""The server's side of the worker protocol without a socket: frames in, decisions out, on a
fake clock (``now`` in seconds). A hypothesis run then drives it with arbitrary sequences and
checks what must always hold."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orbit_server.worker_protocol import (
    CLOSE_CODES,
    CLOSE_SESSION_EXPIRED,
    MOVES,
    Action,
    AddCredit,
    Apply,
    Close,
    Greet,
    Phase,
    Send,
    Settings,
    Why,
    WorkerProtocol,
    close_code,
)
from orbit_wire.errors import ErrorCode
from orbit_wire.frames import (
    ClaimOp,
    Credit,
    DrainOp,
    ErrorFrame,
    Heartbeat,
    HeartbeatAck,
    Hello,
    OpResult,
    Request,
    Response,
    Welcome,
    encode,
)
from orbit_wire.limits import MAX_FRAME_BYTES
from orbit_wire.model import Capability

SETTINGS = Settings(hello_timeout_ms=10_000, session_ttl_ms=15_000, heartbeat_ms=5_000,
                    kill_grace_ms=2_000)
HELLO = Hello("c" * 32, "0" * 64, "a" * 32, "1" * 64, "b" * 32, (Capability("h", "v1", "v1"),), 2)
WALL_MS = 1_700_000_000_000


def text(frame: object) -> str:
    return encode(frame).decode()  # type: ignore[arg-type]


def fatal(code: ErrorCode) -> tuple[ErrorCode, int]:
    """What a fatal answer looks like: (its error code, its close code)."""
    return code, close_code(code)


def fatal_of(actions: list[Action]) -> tuple[ErrorCode, int]:
    error, closed = actions
    assert isinstance(error, Send) and isinstance(error.frame, ErrorFrame)
    assert error.frame.fatal and isinstance(closed, Close) and closed.why is Why.FATAL
    return error.frame.code, closed.code


def opened(now: float = 0.0, valid_until_ms: int | None = None) -> WorkerProtocol:
    protocol = WorkerProtocol(SETTINGS, now)
    assert protocol.receive(text(HELLO), now) == [Greet(HELLO)]
    [welcome] = protocol.greeted("w" * 32, now=now, now_ms=WALL_MS,
                                 valid_until_ms=valid_until_ms)
    assert isinstance(welcome, Send) and welcome.frame == Welcome(
        "w" * 32, 15_000, 5_000, 2_000, WALL_MS)
    return protocol


def request(request_id: int, *ops: object) -> str:
    return text(Request(request_id, tuple(ops)))  # type: ignore[arg-type]


# ------------------------------------------------------------------ before the hello

@pytest.mark.parametrize(("message", "expected"), [
    (text(Heartbeat()), fatal(ErrorCode.OUT_OF_ORDER)),
    (text(Credit(1)), fatal(ErrorCode.OUT_OF_ORDER)),
    (None, fatal(ErrorCode.BAD_FRAME)),  # binary
    ("{not json", fatal(ErrorCode.BAD_FRAME)),
    ('{"type": "teleport"}', fatal(ErrorCode.UNKNOWN_FRAME_TYPE)),
    ('{"type": "heartbeat", "pad": "' + "x" * MAX_FRAME_BYTES + '"}',
     fatal(ErrorCode.FRAME_TOO_LARGE)),
    (text(msgspec.structs.replace(HELLO, protocol=2)),
     fatal(ErrorCode.UNSUPPORTED_PROTOCOL)),
])
def test_the_first_frame_must_be_a_hello_it_can_serve(message: str | None,
                                                      expected: tuple[ErrorCode, int]) -> None:
    protocol = WorkerProtocol(SETTINGS, 0.0)
    assert fatal_of(protocol.receive(message, 1.0)) == expected
    assert protocol.phase is Phase.CLOSING
    assert protocol.receive(text(HELLO), 2.0) == []  # nothing more is decided
    assert protocol.next_timer() is None


def test_a_hello_is_greeted_before_any_other_frame_is_read() -> None:
    protocol = WorkerProtocol(SETTINGS, 0.0)
    assert protocol.receive(text(HELLO), 1.0) == [Greet(HELLO)]
    assert protocol.phase is Phase.GREETING
    with pytest.raises(RuntimeError):
        protocol.receive(text(Heartbeat()), 1.5)  # the driver reads nothing meanwhile


def test_a_refused_hello_is_a_fatal_error_with_its_close_code() -> None:
    protocol = WorkerProtocol(SETTINGS, 0.0)
    protocol.receive(text(HELLO), 1.0)
    actions = protocol.refused(ErrorCode.RATE_LIMITED, "later", retryable=True)
    assert fatal_of(actions) == (ErrorCode.RATE_LIMITED, 4012)
    assert isinstance(actions[0], Send) and actions[0].frame == ErrorFrame(
        ErrorCode.RATE_LIMITED, "later", retryable=True, fatal=True)


def test_no_hello_in_time_closes_4008() -> None:
    protocol = WorkerProtocol(SETTINGS, 100.0)
    assert protocol.next_timer() == 110.0
    assert protocol.handle_timer(109.9) == []
    assert protocol.handle_timer(110.0) == [Close(CLOSE_SESSION_EXPIRED, "no hello",
                                                  Why.NO_HELLO)]
    assert protocol.handle_timer(111.0) == [] and protocol.next_timer() is None


def test_the_hello_deadline_runs_while_the_hello_is_authenticated() -> None:
    protocol = WorkerProtocol(SETTINGS, 0.0)
    protocol.receive(text(HELLO), 9.0)
    [closed] = protocol.handle_timer(10.0)
    assert isinstance(closed, Close) and closed.why is Why.NO_HELLO
    # The hello's answer comes too late: the session is not opened.
    assert protocol.greeted("w" * 32, now=10.5, now_ms=WALL_MS, valid_until_ms=None) == []


# ------------------------------------------------------------------ an open session

def test_heartbeats_credit_and_a_second_hello() -> None:
    protocol = opened()
    assert protocol.receive(text(Heartbeat()), 1.0) == [Send(HeartbeatAck())]
    assert protocol.receive(text(Credit(3)), 1.0) == [AddCredit(3)]
    assert protocol.credit.outstanding == 3 and protocol.credit.bound == 4
    assert fatal_of(protocol.receive(text(HELLO), 2.0)) == fatal(ErrorCode.OUT_OF_ORDER)


def test_credit_above_twice_the_capacity_is_refused_and_not_added() -> None:
    protocol = opened()
    protocol.receive(text(Credit(3)), 1.0)
    protocol.credit.spend(1)  # a reservation sent
    assert protocol.receive(text(Credit(2)), 1.0) == [AddCredit(2)]
    assert fatal_of(protocol.receive(text(Credit(1)), 1.0)) == (ErrorCode.LIMIT_EXCEEDED, 4004)
    assert protocol.credit.outstanding == 4


def test_requests_one_at_a_time_with_increasing_ids() -> None:
    protocol = opened()
    claim, drain = ClaimOp("m1", 2), DrainOp("m2")
    assert protocol.receive(request(5, claim), 1.0) == [
        Apply(Request(5, (claim,)), drain=False, claims=True)]
    assert fatal_of(protocol.receive(request(6, drain), 1.0)) == (
        ErrorCode.CONCURRENT_REQUEST, 4003)

    protocol = opened()
    protocol.receive(request(5, claim), 1.0)
    answer = OpResult("m1", True, claimed=(), credited=2)
    assert protocol.answered(5, [answer]) == [Send(Response(5, (answer,)))]
    assert protocol.receive(request(6, drain), 1.0) == [
        Apply(Request(6, (drain,)), drain=True, claims=False)]
    protocol.answered(6, [OpResult("m2", True)])
    assert fatal_of(protocol.receive(request(6, drain), 1.0)) == (ErrorCode.OUT_OF_ORDER, 4003)


def test_claims_may_ask_for_twice_the_capacity_at_most() -> None:
    protocol = opened()
    assert protocol.receive(request(1, ClaimOp("m1", 2), ClaimOp("m2", 2)), 1.0)[0] == Apply(
        Request(1, (ClaimOp("m1", 2), ClaimOp("m2", 2))), drain=False, claims=True)
    protocol.answered(1, [OpResult("m1", True), OpResult("m2", True)])
    assert fatal_of(protocol.receive(request(2, ClaimOp("m3", 5)), 1.0)) == (
        ErrorCode.LIMIT_EXCEEDED, 4004)


def test_a_silent_session_closes_4008_and_every_frame_keeps_it_alive() -> None:
    protocol = opened(now=0.0)
    assert protocol.next_timer() == 15.0
    protocol.receive(text(Heartbeat()), 10.0)
    assert protocol.handle_timer(15.0) == [] and protocol.next_timer() == 25.0
    assert protocol.handle_timer(25.0) == [Close(CLOSE_SESSION_EXPIRED, "session expired",
                                                 Why.SILENT)]


def test_the_session_ends_with_its_credential() -> None:
    # The credential holds 4 s more of wall-clock time after the hello's transaction.
    protocol = opened(now=50.0, valid_until_ms=WALL_MS + 4_000)
    assert protocol.next_timer() == 54.0
    actions = protocol.handle_timer(54.0)
    error, closed = actions
    assert isinstance(error, Send) and error.frame == ErrorFrame(
        ErrorCode.UNAUTHENTICATED, "the worker's credential expired", retryable=False,
        fatal=True)
    assert closed == Close(4006, "UNAUTHENTICATED", Why.CREDENTIAL_ENDED)


def test_after_a_close_the_request_in_flight_is_answered_with_nothing() -> None:
    protocol = opened()
    protocol.receive(request(1, DrainOp("m1")), 1.0)
    assert protocol.close(4009, "replaced") == [Close(4009, "replaced", Why.OWN)]
    assert protocol.close(4009, "replaced") == []  # once
    assert protocol.fatal(ErrorCode.UNAVAILABLE, "x") == []
    assert protocol.answered(1, [OpResult("m1", True)]) == []
    with pytest.raises(RuntimeError):
        protocol.answered(1, [OpResult("m1", True)])  # not in flight any more


def test_every_move_of_the_table_is_reachable_and_closing_is_final() -> None:
    assert {phase for phase, _step in MOVES} == {Phase.AWAITING_HELLO, Phase.GREETING,
                                                 Phase.OPEN}
    assert all(to is not Phase.AWAITING_HELLO for to in MOVES.values())


def test_the_close_codes_are_the_documented_ones() -> None:
    doc = (Path(__file__).resolve().parents[3] / "docs" / "protocol.md").read_text()
    line = " ".join(doc.split("Close codes after a fatal `error` frame:")[1].split(";")[0]
                    .split())
    documented = {ErrorCode(name): int(code)
                  for code, names in re.findall(r"(\d{4}) ((?:`[A-Z_]+`/?)+)", line)
                  for name in re.findall(r"`([A-Z_]+)`", names)}
    assert documented == CLOSE_CODES


# ------------------------------------------------------------------ any sequence

_FRAMES = st.sampled_from([
    text(HELLO), text(Heartbeat()), text(Credit(1)), text(Credit(9)), request(1, DrainOp("d")),
    request(2, ClaimOp("c", 1)), request(3, ClaimOp("c", 9)), "{not json", None,
    '{"type": "x"}',
])
_EVENTS = st.lists(st.one_of(
    st.tuples(st.just("frame"), _FRAMES),
    st.tuples(st.just("time"), st.floats(0.0, 20.0)),
    st.tuples(st.just("answer"), st.none()),
    st.tuples(st.just("close"), st.none()),
), max_size=40)


@settings(max_examples=300, deadline=None)
@given(_EVENTS, st.booleans())
def test_any_sequence_keeps_the_rules(events: list[tuple[str, object]], refuse: bool) -> None:
    protocol = WorkerProtocol(SETTINGS, 0.0)
    now = 0.0
    in_flight: Request | None = None
    closes = 0
    for kind, value in events:
        was_closing = protocol.closing
        if kind == "frame":
            actions = protocol.receive(value, now)  # type: ignore[arg-type]
        elif kind == "time":
            now += value  # type: ignore[operator]
            due = protocol.next_timer()
            actions = protocol.handle_timer(now)
            assert bool(actions) == (due is not None and now >= due)
        elif kind == "answer" and in_flight is not None:
            actions = protocol.answered(in_flight.id, [OpResult(op.msg_id, True)
                                                       for op in in_flight.ops])
            in_flight = None
        elif kind == "close":
            actions = protocol.close(4009, "replaced")
        else:
            continue
        if actions and isinstance(actions[0], Greet):
            actions = (protocol.refused(ErrorCode.UNAUTHENTICATED, "no", retryable=False)
                       if refuse else protocol.greeted("w" * 32, now=now, now_ms=WALL_MS,
                                                       valid_until_ms=None))
        if was_closing:
            assert actions == []  # nothing is decided after a close
        for i, action in enumerate(actions):
            if isinstance(action, Send) and isinstance(action.frame, ErrorFrame):
                # A fatal error frame is followed by its own close code, and nothing else.
                [closed] = actions[i + 1:]
                assert isinstance(closed, Close)
                assert (closed.code, closed.reason) == (close_code(action.frame.code),
                                                        action.frame.code.value)
            if isinstance(action, Apply):
                assert protocol.phase is Phase.OPEN and in_flight is None
                in_flight = action.request
            if isinstance(action, Send) and isinstance(action.frame, Response):
                assert not protocol.closing
        closes += sum(isinstance(a, Close) for a in actions)
        assert closes <= 1 and (closes == 1) == protocol.closing
        assert 0 <= protocol.credit.outstanding <= protocol.credit.bound


# ------------------------------------------------------------------ grants


def test_a_hello_asking_for_grants_is_welcomed_with_the_features_served() -> None:
    protocol = WorkerProtocol(SETTINGS, 0.0)
    asking = msgspec.structs.replace(HELLO, features=("grant", "teleport"))
    protocol.receive(text(asking), 0.0)
    [welcome] = protocol.greeted("w" * 32, now=0.0, now_ms=WALL_MS, valid_until_ms=None)
    assert isinstance(welcome, Send) and isinstance(welcome.frame, Welcome)
    assert welcome.frame.features == ("grant",)  # an unknown feature is not granted
    plain = opened()
    assert plain.hello is not None and plain.hello.features == ()


def test_every_message_read_is_numbered_from_the_hello() -> None:
    # A grant's basis is this count: the worker numbers the frames it sends the same way,
    # so every message the server read counts, whatever it was.
    protocol = opened()
    assert protocol.frames_read == 1
    protocol.receive(text(Heartbeat()), 1.0)
    protocol.receive(text(Credit(1)), 1.0)
    assert protocol.frames_read == 3
    protocol.receive("{not json", 2.0)  # fatal, and still read
    assert protocol.frames_read == 4
    protocol.receive(text(Heartbeat()), 3.0)  # after the close: not read any more
    assert protocol.frames_read == 4
