"""Connection-level errors that need no credential: each closes only the offending socket."""

from __future__ import annotations

import httpx
import pytest
from support.protocol_client import ProtocolClient
from support.server import ServerProcess
from support.waiting import UNIT

from orbit_wire.frames import Credit, Heartbeat
from orbit_wire.limits import MAX_FRAME_BYTES

pytestmark = pytest.mark.asyncio


async def _expect(server: ServerProcess, data: str | bytes, code: str) -> int | None:
    wc = await ProtocolClient.connect(server.ws_url)
    try:
        await wc.send_raw(data)
        return await wc.expect_fatal(code)
    finally:
        await wc.close()


async def test_first_frame_must_be_hello(server: ServerProcess) -> None:
    wc = await ProtocolClient.connect(server.ws_url)
    try:
        await wc.send(Heartbeat())
        assert await wc.expect_fatal("OUT_OF_ORDER") == 4003
    finally:
        await wc.close()
    wc = await ProtocolClient.connect(server.ws_url)
    try:
        await wc.send(Credit(1))
        assert await wc.expect_fatal("OUT_OF_ORDER") == 4003
    finally:
        await wc.close()


async def test_malformed_json_is_bad_frame(server: ServerProcess) -> None:
    assert await _expect(server, "{not json", "BAD_FRAME") == 4001


async def test_binary_frame_is_bad_frame(server: ServerProcess) -> None:
    assert await _expect(server, b'{"type": "heartbeat"}', "BAD_FRAME") == 4001


async def test_unknown_frame_type(server: ServerProcess) -> None:
    assert await _expect(server, '{"type": "teleport"}', "UNKNOWN_FRAME_TYPE") == 4001


async def test_frame_not_an_object_or_without_type(server: ServerProcess) -> None:
    assert await _expect(server, "[1, 2, 3]", "BAD_FRAME") == 4001
    assert await _expect(server, '{"credits": 3}', "BAD_FRAME") == 4001


async def test_oversized_frame_is_frame_too_large(server: ServerProcess) -> None:
    big = '{"type": "heartbeat", "pad": "' + "x" * (MAX_FRAME_BYTES + 10) + '"}'
    assert await _expect(server, big, "FRAME_TOO_LARGE") == 4002


async def test_deep_nesting_is_rejected(server: ServerProcess) -> None:
    deep = '{"type": "heartbeat", "pad": ' + "[" * 5000 + "]" * 5000 + "}"
    assert await _expect(server, deep, "BAD_FRAME") == 4001


async def test_bad_frames_never_affect_other_connections(server: ServerProcess) -> None:
    healthy = await ProtocolClient.connect(server.ws_url)
    try:
        for data in ("{not json", b"\x00\x01", '{"type": "x"}', '{"type": "request"}'):
            await _expect(server, data, "BAD_FRAME" if data != '{"type": "x"}'
                          else "UNKNOWN_FRAME_TYPE")
        assert not healthy.closed.is_set()
        assert httpx.get(f"{server.url}/healthz", timeout=5 * UNIT).status_code == 200
    finally:
        await healthy.close()
