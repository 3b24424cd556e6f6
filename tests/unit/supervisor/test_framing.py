"""Length-prefixed frames: the sans-I/O decoder, and the blocking helpers over a socketpair."""

from __future__ import annotations

import socket
import struct
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.waiting import UNIT

from orbit_host.framing import (
    FrameDecoder,
    FrameError,
    encode_frame,
    recv_frame,
    send_frame,
)
from orbit_wire.errors import ErrorCode

json_scalars = st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=20)
objects = st.dictionaries(st.text(max_size=8), json_scalars | st.lists(json_scalars, max_size=4),
                          max_size=6)


@given(st.lists(objects, min_size=1, max_size=5), st.integers(1, 17))
def test_frames_survive_any_chunking(frames: list[dict[str, object]], chunk: int) -> None:
    data = b"".join(encode_frame(f) for f in frames)
    decoder = FrameDecoder()
    out: list[dict[str, object]] = []
    for i in range(0, len(data), chunk):
        out.extend(decoder.feed(data[i : i + chunk]))
    assert out == frames
    assert decoder.buffered == 0


def test_partial_frame_is_held_until_complete() -> None:
    data = encode_frame({"t": "ready", "g": 7})
    decoder = FrameDecoder()
    assert decoder.feed(data[:-1]) == []
    assert decoder.buffered == len(data) - 1
    assert decoder.feed(data[-1:]) == [{"t": "ready", "g": 7}]


def test_oversized_header_is_rejected_before_buffering_the_body() -> None:
    decoder = FrameDecoder(max_bytes=1024)
    with pytest.raises(FrameError) as info:
        decoder.feed(struct.pack(">I", 1025))
    assert info.value.code is ErrorCode.FRAME_TOO_LARGE
    with pytest.raises(FrameError):  # the stream has lost its framing for good
        decoder.feed(encode_frame({"ok": 1}))


def test_encode_refuses_frames_over_the_limit() -> None:
    with pytest.raises(FrameError) as info:
        encode_frame({"blob": "x" * 2048}, max_bytes=1024)
    assert info.value.code is ErrorCode.FRAME_TOO_LARGE


@pytest.mark.parametrize("body", [b"not json", b"[1,2]", b'"text"'])
def test_bodies_that_are_not_objects_are_bad_frames(body: bytes) -> None:
    with pytest.raises(FrameError) as info:
        FrameDecoder().feed(struct.pack(">I", len(body)) + body)
    assert info.value.code is ErrorCode.BAD_FRAME


def test_blocking_helpers_over_a_real_socketpair() -> None:
    left, right = socket.socketpair()
    try:
        big = {"t": "run", "payload": "y" * (300 * 1024)}
        def send_both() -> None:
            send_frame(left, big)
            send_frame(left, {"t": "exit"})

        sender = threading.Thread(target=send_both)
        sender.start()
        decoder = FrameDecoder()
        pending: list[dict[str, object]] = []
        assert recv_frame(right, decoder, pending) == big
        assert recv_frame(right, decoder, pending) == {"t": "exit"}
        sender.join(timeout=5 * UNIT)
        left.close()
        assert recv_frame(right, decoder, pending) is None
    finally:
        left.close()
        right.close()


def test_stream_ending_inside_a_frame_is_an_error() -> None:
    left, right = socket.socketpair()
    try:
        left.sendall(encode_frame({"t": "x"})[:-2])
        left.close()
        with pytest.raises(FrameError):
            recv_frame(right, FrameDecoder(), [])
    finally:
        right.close()
