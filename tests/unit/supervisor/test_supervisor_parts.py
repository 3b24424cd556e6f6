"""Small driver parts without a server: the event stream, options, sizes, worker URL."""

from __future__ import annotations

import asyncio

import pytest
from support.waiting import UNIT

from orbit_supervisor.actions import SupervisorEvent
from orbit_supervisor.connection import ServerUrls, worker_url
from orbit_supervisor.events import EventStream
from orbit_supervisor.options import (
    OptionError,
    QueueOutOfScope,
    SupervisorOptions,
    check_queue_scope,
    parse_size,
)
from orbit_wire.errors import ErrorCode

QUEUE = "0" * 32


def test_event_stream_keeps_128_and_counts_drops() -> None:
    stream = EventStream()
    for i in range(200):
        stream.publish(SupervisorEvent("started", attempt_id=str(i)), QUEUE)
    assert stream.dropped == 72
    stream.close()
    stream.publish(SupervisorEvent("late"))  # after close: ignored, not counted

    async def read() -> list[SupervisorEvent]:
        return [e async for e in stream]

    got = asyncio.run(read())
    assert [e.attempt_id for e in got] == [str(i) for i in range(128)]
    assert {e.queue_id for e in got} == {QUEUE}  # stamped with the session's queue
    assert stream.dropped == 72


def test_event_stream_wakes_a_waiting_reader_and_ends_on_close() -> None:
    async def scenario() -> list[str]:
        stream = EventStream()
        got: list[str] = []

        async def reader() -> None:
            async for event in stream:
                got.append(event.type)

        task = asyncio.create_task(reader())
        await asyncio.sleep(0)
        stream.publish(SupervisorEvent("a"))
        await asyncio.sleep(0)
        stream.publish(SupervisorEvent("b"))
        stream.close()
        await asyncio.wait_for(task, 2 * UNIT)
        return got

    assert asyncio.run(scenario()) == ["a", "b"]


@pytest.mark.parametrize(("text", "size"), [("1024", 1024), ("512M", 512 << 20),
                                            ("512MiB", 512 << 20), ("2g", 2 << 30),
                                            ("64K", 64 << 10)])
def test_sizes(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "12X", "-1", "1.5G", "M"])
def test_bad_sizes(text: str) -> None:
    with pytest.raises(OptionError, match="not a size"):
        parse_size(text)


@pytest.mark.parametrize(("field", "value", "match"), [
    ("workers", 0, r"\[1, 256\]"), ("workers", 257, r"\[1, 256\]"), ("workers", True, "workers"),
    ("shutdown_timeout", 0.0, r"\[0.001, 300\]"), ("shutdown_timeout", 301, "300"),
    ("shutdown_timeout", float("nan"), "shutdown_timeout"),
    ("reconnect_min_delay", 0.009, "reconnect_min_delay"),
    ("reconnect_max_delay", 31, "reconnect_max_delay"),
    ("max_tasks_per_child", 0, "max_tasks_per_child"),
    ("max_memory_per_child", 10, "max_memory_per_child"),
    ("child_nice", -1, r"\[0, 19\]"), ("child_nice", 20, r"\[0, 19\]"),
])
def test_option_ranges(field: str, value: object, match: str) -> None:
    with pytest.raises(OptionError, match=match):
        SupervisorOptions(queue_ids=(QUEUE,), **{field: value})  # type: ignore[arg-type]


def test_max_delay_must_not_be_below_min() -> None:
    with pytest.raises(OptionError, match="reconnect_max_delay"):
        SupervisorOptions(queue_ids=(QUEUE,), reconnect_min_delay=2.0, reconnect_max_delay=1.0)
    assert SupervisorOptions(queue_ids=(QUEUE,)).workers == 4


def test_labels_are_checked_by_the_label_rule() -> None:
    labels = (("gpu", "a100"), ("mem", "64G"))
    assert SupervisorOptions(queue_ids=(QUEUE,), labels=labels).labels == labels
    with pytest.raises(OptionError, match="its value must be"):
        SupervisorOptions(queue_ids=(QUEUE,), labels=(("gpu", "a 100"),))


def test_several_queues_need_a_child_each_and_distinct_ids() -> None:
    other = "0" * 31 + "1"
    assert SupervisorOptions(queue_ids=(QUEUE, other), workers=2).queue_id == QUEUE
    with pytest.raises(OptionError, match="at least the number of queues"):
        SupervisorOptions(queue_ids=(QUEUE, other), workers=1)
    with pytest.raises(OptionError, match="named twice"):
        SupervisorOptions(queue_ids=(QUEUE, QUEUE), workers=2)
    with pytest.raises(OptionError, match="32-character"):
        SupervisorOptions(queue_ids=(QUEUE, "nope"), workers=2)
    with pytest.raises(OptionError, match="at least one queue"):
        SupervisorOptions(queue_ids=())


def test_a_queue_outside_the_credentials_scope_is_refused() -> None:
    other = "0" * 31 + "1"
    check_queue_scope((QUEUE,), "cred", (QUEUE,))
    check_queue_scope((QUEUE, other), "cred", ())  # a file without queues: the server's call
    with pytest.raises(QueueOutOfScope, match=f"queue {other} is not in the scope") as info:
        check_queue_scope((QUEUE, other), "cred", (QUEUE,))
    assert info.value.code is ErrorCode.PERMISSION_DENIED and isinstance(info.value, ValueError)


@pytest.mark.parametrize(("base", "ws"), [
    ("http://127.0.0.1:8080", "ws://127.0.0.1:8080/v1/worker"),
    ("https://orbit.example:443/", "wss://orbit.example:443/v1/worker"),
    ("http://h:1/prefix", "ws://h:1/prefix/v1/worker"),
    ("ws://h:1/v1/worker", "ws://h:1/v1/worker"),
])
def test_worker_url(base: str, ws: str) -> None:
    assert worker_url(base) == ws


def test_worker_url_rejects_other_schemes() -> None:
    with pytest.raises(ValueError, match="http"):
        worker_url("ftp://h:1")


def test_server_urls_fail_over_in_order_and_stay_with_one_that_answers() -> None:
    urls = ServerUrls(["http://a:1", "https://b:2/prefix", "http://c:3"])
    assert urls.all == ("ws://a:1/v1/worker", "wss://b:2/prefix/v1/worker",
                        "ws://c:3/v1/worker")
    seen = [urls.current]
    for _ in range(4):
        urls.connect_failed()
        seen.append(urls.current)
    assert seen == [*urls.all, *urls.all[:2]]  # after the last, the first again
    assert urls.current == urls.all[1]  # nothing else moves it: a lost connection stays
    with pytest.raises(ValueError):
        ServerUrls([])
    with pytest.raises(ValueError):
        ServerUrls(["http://a:1", "ftp://b:2"])
