"""Finding 9 of the security review: a text frame that is not valid UTF-8 is answered with
a typed close (a fatal ``BAD_FRAME`` error frame, close 4001) and one log line without a
traceback, and the server keeps serving a healthy worker meanwhile."""

from __future__ import annotations

import websockets
from support.lanes import Lane
from support.protocol_client import ProtocolClient
from support.waiting import UNIT, wait_until
from websockets.frames import Frame, Opcode


async def _send_invalid_text(ws_url: str) -> tuple[int | None, list[str]]:
    """Send one TEXT frame holding invalid UTF-8, bypassing the client's own checks."""
    async with websockets.connect(ws_url, open_timeout=10 * UNIT) as ws:
        ws.protocol.send_frame(Frame(Opcode.TEXT, b'{"type": "hello", "x": "\xff\xfe"}'))
        ws.send_data()  # type: ignore[attr-defined]
        received: list[str] = []
        try:
            async for message in ws:
                received.append(str(message))
        except websockets.ConnectionClosed:
            pass
        return ws.close_code, received


async def test_invalid_utf8_text_frame_gets_a_typed_close_and_one_log_line(lane: Lane) -> None:
    lane.submit()
    async with await lane.connect(credit=1) as healthy:
        [res] = await healthy.reservations(1)
        for _ in range(3):
            code, received = await _send_invalid_text(lane.ws_url)
            assert code == 4001, (code, received)
            assert len(received) == 1 and '"BAD_FRAME"' in received[0], received
        assert (await healthy.start(res)).ok
        done = await healthy.finish(res, "SUCCEEDED", result_json='{"ok": 1}')
        assert done.ok and done.task_state == "SUCCEEDED"
    server = lane.env.server
    wait_until(lambda: server.log_tail(100_000).count("not valid UTF-8") >= 3,
               timeout=5.0, what="the three log lines")
    log = server.log_tail(100_000)
    assert "Traceback" not in log and "UnicodeDecodeError" not in log, log[-3000:]
    assert log.count("not valid UTF-8") == 3


async def test_binary_frames_are_still_refused(lane: Lane) -> None:
    async with await ProtocolClient.connect(lane.ws_url) as wc:
        await wc.send_raw(b"\x00\x01")
        assert await wc.expect_fatal("BAD_FRAME") == 4001
