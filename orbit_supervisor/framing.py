"""Length-prefixed orjson frames between the supervisor and its children.

The implementation lives in ``orbit_child.framing`` because both ends use it, and a child (or
the template it is forked from) must import no supervisor code: importing this package would
pull the whole supervisor (asyncio, websockets, the session) into every handler process.
"""

from orbit_child.framing import (
    DEFAULT_MAX_FRAME_BYTES,
    FrameDecoder,
    FrameError,
    encode_frame,
    recv_frame,
    send_frame,
)

__all__ = [
    "DEFAULT_MAX_FRAME_BYTES",
    "FrameDecoder",
    "FrameError",
    "encode_frame",
    "recv_frame",
    "send_frame",
]
