"""A small TCP proxy on 127.0.0.1 that can cut or blackhole connections, for reconnect tests.

    proxy = TcpProxy(target_port).start()     # proxy.port is where clients connect
    proxy.cut()                               # abort every open connection (both sides)
    proxy.blackhole(True)                     # bytes are swallowed both ways; sockets stay open
    proxy.blackhole(False)
    proxy.sever()                             # cut the clients only: the server side stays
                                              # open and hears nothing more (a dead peer)
    proxy.retarget(other_port)                # new connections go to another server
    proxy.stop()                              # closes everything; the thread ends (bounded)

With ``tap=`` (tests/support/ws_tap.py: OpTap) it reads the worker protocol frame by frame
and drops a chosen request or answer, cutting that connection, when the tap says so; or
holds a frame back (``Hold``) and then delivers it or cuts.

With ``rename=(old, new)`` a connection whose first request asks for the path ``old`` asks
the server for ``new`` instead (``renamed`` counts them): a path the server has no route at
refuses what the client meant for ``old``, e.g. a WebSocket upgrade.

It runs its own asyncio loop on a daemon thread so synchronous tests can drive it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from .waiting import UNIT
from .ws_tap import Hold

if TYPE_CHECKING:
    from .ws_tap import Direction, OpTap, Verdict

Pair = tuple[asyncio.StreamWriter, asyncio.StreamWriter | None]
_HOLD_POLL_S = 0.005

_CHUNK = 65536
_THREAD_JOIN_S = 5.0 * UNIT


class TcpProxy:
    def __init__(self, target_port: int, *, port: int = 0, host: str = "127.0.0.1",
                 tap: OpTap | None = None, rename: tuple[bytes, bytes] | None = None) -> None:
        self.target = (host, target_port)
        self.tap = tap
        self.rename = rename
        self.renamed = 0
        self.host = host
        self.port = port
        self.connections_total = 0
        self._blackholed = False
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="tcp-proxy")
        self._server: asyncio.base_events.Server | None = None
        self._pairs: set[Pair] = set()
        self._severed: set[Pair] = set()  # client cut; the server side is read, never written
        self._ended: set[Pair] = set()  # one of its tapped directions has ended

    # ------------------------------------------------------------ control (any thread)

    def start(self) -> TcpProxy:
        self._thread.start()
        self._call(self._listen()).result(timeout=_THREAD_JOIN_S)
        return self

    def cut(self) -> int:
        """Abort every open connection; returns how many were cut."""
        cut = self._call(self._cut()).result(timeout=_THREAD_JOIN_S)
        assert isinstance(cut, int)
        return cut

    def blackhole(self, on: bool) -> None:
        self._blackholed = on

    def sever(self) -> int:
        """Abort the client side of every open connection and leave its server side open
        and silent (what the server would see of a peer that vanished without a FIN): it
        hears nothing more until it gives up on the connection. Returns how many."""
        severed = self._call(self._sever()).result(timeout=_THREAD_JOIN_S)
        assert isinstance(severed, int)
        return severed

    def retarget(self, port: int) -> None:
        """New connections go to ``port`` (open ones stay where they are)."""
        self.target = (self.target[0], port)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        with contextlib.suppress(Exception):
            self._call(self._close()).result(timeout=_THREAD_JOIN_S)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=_THREAD_JOIN_S)
        if not self._thread.is_alive():
            self._loop.close()

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------ the loop's side

    def _call(self, coro: object) -> Future[object]:
        return asyncio.run_coroutine_threadsafe(coro, self._loop)  # type: ignore[arg-type]

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._accept, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _accept(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter
                      ) -> None:
        # Stopping cancels this task; Python 3.11's start_server then logs the cancellation
        # as an error (it asks a cancelled task for its exception), so it ends normally.
        with contextlib.suppress(asyncio.CancelledError):
            await self._serve(client_r, client_w)

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter
                     ) -> None:
        self.connections_total += 1
        if self._blackholed:
            # A network outage: the client connects, nothing ever answers.
            pair: Pair = (client_w, None)
            self._pairs.add(pair)
            with contextlib.suppress(Exception):
                while await client_r.read(_CHUNK):
                    pass
            self._pairs.discard(pair)
            client_w.transport.abort()
            return
        try:
            server_r, server_w = await asyncio.open_connection(*self.target)
        except OSError:
            client_w.transport.abort()
            return
        pair = (client_w, server_w)
        self._pairs.add(pair)
        try:
            if self.rename is not None:
                await self._renamed_first(client_r, server_w)
            if self.tap is None:
                await asyncio.gather(self._pump(client_r, server_w, pair),
                                     self._pump(server_r, client_w, pair))
            else:
                await asyncio.gather(self._tapped(client_r, server_w, "to_server", pair),
                                     self._tapped(server_r, client_w, "to_client", pair))
        finally:
            self._pairs.discard(pair)
            self._severed.discard(pair)
            self._ended.discard(pair)
            client_w.transport.abort()
            server_w.transport.abort()

    async def _renamed_first(self, reader: asyncio.StreamReader,
                             writer: asyncio.StreamWriter) -> None:
        """Forward the first request's head, its path renamed if it is ``rename``'s old one
        (the request line arrives whole in the first read, from any client)."""
        assert self.rename is not None
        old, new = self.rename
        data = await reader.read(_CHUNK)
        method, _, rest = data.partition(b" ")
        if rest.startswith(old + b" ") or rest.startswith(old + b"?"):
            data = method + b" " + new + rest[len(old):]
            self.renamed += 1
        writer.write(data)
        await writer.drain()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    pair: Pair | None = None) -> None:
        with contextlib.suppress(Exception):
            while True:
                data = await reader.read(_CHUNK)
                if not data:
                    if not self._blackholed:
                        return
                    await asyncio.sleep(3600)  # a blackhole never delivers the close either
                if not self._blackholed and pair not in self._severed:
                    writer.write(data)
                    await writer.drain()

    async def _tapped(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      direction: Direction, pair: Pair) -> None:
        """Forward whole frames, as the tap decides; a dropped one cuts the connection."""
        assert self.tap is not None
        splitter = self.tap.splitter(direction)
        try:
            with contextlib.suppress(Exception):
                while data := await reader.read(_CHUNK):
                    if pair in self._severed:
                        continue  # read and forgotten: the peer is gone
                    for frame in splitter.feed(data):
                        verdict: Verdict = "forward"
                        if frame.message is not None and not self._blackholed:
                            verdict = self.tap.decide(direction, frame.message)
                            if isinstance(verdict, Hold):
                                verdict = await self._hold(verdict, pair, frame.message)
                        if verdict == "drop_and_cut":
                            for w in pair:
                                if w is not None:
                                    w.transport.abort()
                            return
                        if not self._blackholed:
                            writer.write(frame.raw)
                    await writer.drain()
        finally:
            self._ended.add(pair)

    async def _hold(self, hold: Hold, pair: Pair, message: dict[str, Any]) -> Verdict:
        """Keep a frame back (nothing more of its direction is read meanwhile) until the
        hold's time is up, the tap releases it, or the connection ends; then what the hold
        says (a connection that ended has nothing to deliver to)."""
        assert self.tap is not None
        deadline = self._loop.time() + hold.seconds
        releases = self.tap.releases
        while (self._loop.time() < deadline and self.tap.releases == releases
               and pair not in self._ended
               and not any(w is not None and w.transport.is_closing() for w in pair)):
            await asyncio.sleep(_HOLD_POLL_S)
        ended = pair in self._ended or any(
            w is not None and w.transport.is_closing() for w in pair)
        deliver = hold.then == "deliver" and not ended
        self.tap.hold_ended(message, deliver)
        return "forward" if deliver else "drop_and_cut"

    async def _sever(self) -> int:
        pairs = list(self._pairs)
        for pair in pairs:
            self._severed.add(pair)
            pair[0].transport.abort()
        return len(pairs)

    async def _cut(self) -> int:
        pairs = list(self._pairs)
        for client_w, server_w in pairs:
            client_w.transport.abort()
            if server_w is not None:
                server_w.transport.abort()
        return len(pairs)

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        await self._cut()
        tasks = [t for t in asyncio.all_tasks(self._loop) if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        # Let them end while the loop runs (bounded: each only has its cancellation to take).
        if tasks:
            await asyncio.wait(tasks, timeout=_THREAD_JOIN_S)
