"""The producer channel's core (orbit_client/channel_core.py) without sockets: what it sends,
what it sends again after a reconnect, what each frame from the server delivers to whom, and
when the connection tries are spent. Frames are built with the contract's own encoder."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from orbit_client.channel_core import MAX_PUSHED, ChannelCore, Post
from orbit_client.errors import OrbitApiError
from orbit_wire.errors import ErrorCode
from orbit_wire.limits import MAX_FRAME_BYTES
from orbit_wire.producer_frames import (
    MAX_WATCH,
    Ended,
    Failure,
    ProducerError,
    Submit,
    Submitted,
    Watch,
    Watching,
    decode_client_message,
    encode_message,
)

QUEUE = "a" * 32


def tid(n: int) -> str:
    return f"{n:032x}"


def view(n: int, state: str = "PENDING", **more: Any) -> dict[str, Any]:
    return {"id": tid(n), "queue_id": QUEUE, "state": state, **more}


def spec(key: str) -> bytes:
    return msgspec.json.encode({"handler": "h", "handler_version": "1", "payload_version": "1",
                                "payload": {}, "operation_key": key})


class Boxes:
    """What the posts put in each box, by name."""

    def __init__(self) -> None:
        self.got: dict[str, list[Any]] = {}

    def box(self, name: str) -> Any:
        return lambda item: self.got.setdefault(name, []).append(item)


def run(posts: list[Post]) -> None:
    for post in posts:
        post()


def core(**kwargs: Any) -> ChannelCore:
    return ChannelCore(lambda: 0.5, **kwargs)


def sent(frames: list[bytes]) -> list[Any]:
    return [decode_client_message(f) for f in frames]


def test_a_submit_before_the_connection_is_sent_by_connected() -> None:
    c, boxes = core(), Boxes()
    request, frames = c.submit(QUEUE, [spec("k1")], boxes.box("s"))
    assert frames == [] and c.busy
    [frame] = c.connected()
    [message] = sent([frame])
    assert isinstance(message, Submit)
    assert (message.id, message.queue_id, message.watch) == (request, QUEUE, True)
    assert [t["operation_key"] for t in message.tasks] == ["k1"]
    # Once open, a submit's frame goes out at once.
    _, frames = c.submit(QUEUE, [spec("k2"), spec("k3")], boxes.box("s2"), watch=False)
    [second] = sent(frames)
    assert isinstance(second, Submit) and len(second.tasks) == 2 and not second.watch


def test_submitted_answers_its_submit_with_views_and_exact_result_text() -> None:
    c, boxes = core(), Boxes()
    c.connected()
    request, _ = c.submit(QUEUE, [spec("k")], boxes.box("s"))
    frame = (b'{"type":"submitted","id":%d,"tasks":[{"id":"%s","queue_id":"%s",'
             b'"state":"SUCCEEDED","result":{"n":1.10}}]}'
             % (request, tid(1).encode(), QUEUE.encode()))
    reaction = c.receive(frame)
    assert not reaction.drop
    run(reaction.posts)
    [[answer]] = boxes.got["s"]
    assert answer["result"] == {"n": 1.1} and answer["result_json"] == '{"n":1.10}'
    assert not c.busy
    # A second answer to the same request (a resend answered twice) is ignored.
    assert c.receive(frame).posts == []


def test_unanswered_submits_are_sent_again_unchanged_after_a_reconnect() -> None:
    c, boxes = core(), Boxes()
    c.connected()
    answered, _ = c.submit(QUEUE, [spec("a")], boxes.box("a"))
    _, first = c.submit(QUEUE, [spec("b")], boxes.box("b"))
    _, second = c.submit(QUEUE, [spec("c")], boxes.box("c"))
    run(c.receive(encode_message(Submitted(answered, (view(1),)))).posts)
    c.disconnected()
    assert c.busy and c.pending_submits() == 2
    assert c.connected() == first + second  # the same bytes: same ids, same keys


def test_an_abandoned_submit_is_not_sent_again_and_its_answer_is_dropped() -> None:
    c, boxes = core(), Boxes()
    c.connected()
    request, _ = c.submit(QUEUE, [spec("a")], boxes.box("a"))
    c.abandon(request)
    c.disconnected()
    assert c.connected() == [] and not c.busy
    assert c.receive(encode_message(Submitted(request, (view(1),)))).posts == []
    assert "a" not in boxes.got


def test_a_wait_for_a_task_the_submit_watches_sends_nothing_and_ended_delivers() -> None:
    c, boxes = core(), Boxes()
    c.connected()
    request, _ = c.submit(QUEUE, [spec("a")], boxes.box("s"))
    run(c.receive(encode_message(Submitted(request, (view(1),)))).posts)
    waiter, posts, frames = c.wait([tid(1)], boxes.box("w"))
    assert posts == [] and frames == []
    run(c.receive(encode_message(Ended(view(1, "FAILED")))).posts)
    assert boxes.got["w"] == [(tid(1), {**view(1, "FAILED"), "result_json": None})]
    assert not c.busy
    c.stop_waiting(waiter)  # after the last delivery: nothing left to forget


def test_a_wait_watches_what_is_not_pushed_and_unknown_tasks_deliver_none() -> None:
    c, boxes = core(), Boxes()
    c.connected()
    _, posts, frames = c.wait([tid(1), tid(2), tid(1)], boxes.box("w"))
    [watch] = sent(frames)
    assert posts == [] and isinstance(watch, Watch)
    assert sorted(watch.task_ids) == [tid(1), tid(2)]
    run(c.receive(encode_message(Watching(watch.id, unknown=(tid(2),)))).posts)
    assert boxes.got["w"] == [(tid(2), None)]
    # A second wait for the same task does not watch it again.
    _, _, again = c.wait([tid(1)], boxes.box("w2"))
    assert again == []
    run(c.receive(encode_message(Ended(view(1, "SUCCEEDED")))).posts)
    assert boxes.got["w"][-1][0] == tid(1) and boxes.got["w2"][0][0] == tid(1)


def test_a_terminal_view_received_serves_later_waits_without_a_frame() -> None:
    c, boxes = core(), Boxes()
    c.connected()
    run(c.receive(encode_message(Ended(view(1, "CANCELLED")))).posts)
    _, posts, frames = c.wait([tid(1)], boxes.box("w"))
    run(posts)
    assert frames == [] and boxes.got["w"][0][1]["state"] == "CANCELLED"
    # NEEDS_REVIEW may change (an operator retries it): asked again, never served from memory.
    run(c.receive(encode_message(Ended(view(2, "NEEDS_REVIEW")))).posts)
    _, posts, frames = c.wait([tid(2)], boxes.box("r"))
    assert posts == [] and [m.task_ids for m in sent(frames)] == [(tid(2),)]


def test_waits_are_watched_again_after_a_reconnect_and_stopped_ones_are_not() -> None:
    c, boxes = core(), Boxes()
    c.connected()
    kept, _, _ = c.wait([tid(1)], boxes.box("kept"))
    gone, _, _ = c.wait([tid(2)], boxes.box("gone"))
    c.stop_waiting(gone)
    c.disconnected()
    assert c.waited_tasks() == {tid(1)}
    [watch] = sent(c.connected())
    assert isinstance(watch, Watch) and watch.task_ids == (tid(1),)
    run(c.receive(encode_message(Ended(view(1, "SUCCEEDED")))).posts)
    assert boxes.got["kept"][0][0] == tid(1) and "gone" not in boxes.got
    c.stop_waiting(kept)


def test_watches_are_cut_to_the_frame_limit() -> None:
    c, boxes = core(), Boxes()
    c.connected()
    _, _, frames = c.wait([tid(n) for n in range(MAX_WATCH + 5)], boxes.box("w"))
    assert [len(m.task_ids) for m in sent(frames)] == [MAX_WATCH, 5]


def test_an_error_answering_a_request_fails_only_its_caller() -> None:
    c, boxes = core(), Boxes()
    c.connected()
    request, _ = c.submit(QUEUE, [spec("a")], boxes.box("s"))
    other, _ = c.submit(QUEUE, [spec("b")], boxes.box("other"))
    failure = Failure("CONFLICT", "operation key a names another task")
    reaction = c.receive(encode_message(ProducerError(failure, request)))
    run(reaction.posts)
    [error] = boxes.got["s"]
    assert isinstance(error, OrbitApiError) and not reaction.drop
    assert (error.code, error.status, error.retryable) == (ErrorCode.CONFLICT, 409, False)
    assert c.pending_submits() == 1 and "other" not in boxes.got
    # An error answering a watch ends the waits on its tasks.
    _, _, frames = c.wait([tid(1)], boxes.box("w"))
    [watch] = sent(frames)
    run(c.receive(encode_message(ProducerError(Failure("RATE_LIMITED", "slow down", True),
                                               watch.id))).posts)
    [werror] = boxes.got["w"]
    assert werror.code is ErrorCode.RATE_LIMITED and werror.status == 429 and werror.retryable
    assert c.waited_tasks() == frozenset()
    del other


def test_a_connection_error_or_a_bad_frame_fails_everything_and_drops() -> None:
    for frame, code in [
        (encode_message(ProducerError(Failure("UNAUTHENTICATED", "revoked"))),
         ErrorCode.UNAUTHENTICATED),
        (b'{"type":"submitted","id":"x"}', ErrorCode.INTERNAL),
        (b'{"type":"ended","task":[1]}', ErrorCode.INTERNAL),
        (b'{"type":"gossip"}', ErrorCode.INTERNAL),
    ]:
        c, boxes = core(), Boxes()
        c.connected()
        c.submit(QUEUE, [spec("a")], boxes.box("s"))
        c.wait([tid(1)], boxes.box("w"))
        reaction = c.receive(frame)
        run(reaction.posts)
        assert reaction.drop and not c.busy, frame
        assert boxes.got["s"][0].code is code and boxes.got["w"][0].code is code


def test_an_unknown_error_code_stays_readable() -> None:
    c, boxes = core(), Boxes()
    c.connected()
    request, _ = c.submit(QUEUE, [spec("a")], boxes.box("s"))
    run(c.receive(encode_message(ProducerError(Failure("NEWFANGLED", "what"), request))).posts)
    [error] = boxes.got["s"]
    assert error.code is ErrorCode.INTERNAL and "NEWFANGLED: what" in error.message


def test_settled_views_kept_are_bounded_in_count_and_bytes() -> None:
    c, boxes = core(max_settled=3), Boxes()
    c.connected()
    for n in range(5):
        c.receive(encode_message(Ended(view(n, "SUCCEEDED"))))
    _, posts, frames = c.wait([tid(0), tid(1), tid(4)], boxes.box("w"))
    assert len(posts) == 1 and [m.task_ids for m in sent(frames)] != []
    assert sorted(t for m in sent(frames) for t in m.task_ids) == [tid(0), tid(1)]
    small = core(max_settled_bytes=300)
    small.connected()
    for n in range(5):
        small.receive(encode_message(Ended(view(n, "SUCCEEDED", pad="x" * 100))))
    _, posts, _ = small.wait([tid(n) for n in range(5)], boxes.box("b"))
    assert len(posts) == 1  # only the newest fits


def test_tries_pause_longer_and_end_after_the_strikes() -> None:
    c, boxes = core(max_strikes=3), Boxes()
    c.submit(QUEUE, [spec("a")], boxes.box("s"))
    assert c.next_pause() == 0.0
    c.connect_failed()
    first = c.next_pause()
    c.connect_failed()
    second = c.next_pause()
    assert first is not None and second is not None and 0 < first < second
    c.connect_failed()
    assert c.next_pause() is None
    run(c.fail_all(OrbitApiError(ErrorCode.UNAVAILABLE, "gone")))
    assert boxes.got["s"][0].code is ErrorCode.UNAVAILABLE and not c.busy
    assert c.next_pause() == 0.0  # the next use starts afresh


def test_a_connection_that_brings_nothing_counts_as_a_strike_and_one_that_does_not() -> None:
    c, boxes = core(max_strikes=2), Boxes()
    c.wait([tid(1)], boxes.box("w"))
    for _ in range(2):
        c.connected()
        c.disconnected()  # accepted, then closed before the server said anything
    assert c.next_pause() is None
    fresh = core(max_strikes=2)
    fresh.wait([tid(1)], boxes.box("w2"))
    for _ in range(3):
        [watch] = sent(fresh.connected())
        fresh.receive(encode_message(Watching(watch.id)))
        fresh.disconnected()
    assert fresh.next_pause() == 0.0


@pytest.mark.parametrize("state", ["SUCCEEDED", "NEEDS_REVIEW"])
def test_a_settled_view_in_a_submit_answer_is_delivered_to_its_waiters(state: str) -> None:
    # A resend answered with a task that ended while the connection was down.
    c, boxes = core(), Boxes()
    c.connected()
    request, _ = c.submit(QUEUE, [spec("a")], boxes.box("s"))
    c.wait([tid(1)], boxes.box("w"))
    run(c.receive(encode_message(Submitted(request, (view(1, state),)))).posts)
    assert boxes.got["w"][0][1]["state"] == state and not c.busy


def test_an_answer_larger_than_a_frame_is_read_whole() -> None:
    # A batch's answer holds every view, payloads included: past the bound producers keep to.
    c, boxes = core(), Boxes()
    c.connected()
    request, _ = c.submit(QUEUE, [spec("a")], boxes.box("s"))
    views = tuple(view(n, payload={"blob": "x" * 4000}) for n in range(600))
    frame = encode_message(Submitted(request, views))
    assert len(frame) > MAX_FRAME_BYTES
    run(c.receive(frame).posts)
    assert [v["id"] for v in boxes.got["s"][0]] == [tid(n) for n in range(600)]
    broken = c.receive(b'{"type":"ended","task":' + b" " * MAX_FRAME_BYTES + b"}")
    assert broken.drop


def test_submits_stop_asking_for_pushes_past_a_backlog_and_waits_ask_then() -> None:
    c, boxes = core(), Boxes()
    c.connected()
    request, frames = c.submit(QUEUE, [spec("a")], boxes.box("s"))
    assert sent(frames)[0].watch
    views = tuple(view(n) for n in range(MAX_PUSHED))
    run(c.receive(encode_message(Submitted(request, views))).posts)
    later, frames = c.submit(QUEUE, [spec("b")], boxes.box("later"))
    assert not sent(frames)[0].watch
    run(c.receive(encode_message(Submitted(later, (view(MAX_PUSHED),)))).posts)
    _, _, frames = c.wait([tid(0), tid(MAX_PUSHED)], boxes.box("w"))
    assert [m.task_ids for m in sent(frames)] == [(tid(MAX_PUSHED),)]
    # The watched tasks count, whoever asked: two settle, one place is free.
    for n in (0, 1):
        run(c.receive(encode_message(Ended(view(n, "SUCCEEDED")))).posts)
    _, frames = c.submit(QUEUE, [spec("c")], boxes.box("again"))
    assert sent(frames)[0].watch
