"""The server's listening socket, bound before anything announces the address: a port in use
fails the start with one line naming it, never after a "serving on" line."""

from __future__ import annotations

import errno
import socket

from orbit_wire.errors import ErrorCode, OrbitError


def listen_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (port 0: one the kernel picks), not yet listening
    (uvicorn listens on it); OrbitError UNAVAILABLE naming the address if it cannot be."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as exc:
        raise OrbitError(ErrorCode.UNAVAILABLE,
                         f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock = socket.socket(family, kind, proto)
    try:
        # As uvicorn does: a restart may take the port while old connections sit in TIME_WAIT.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        hint = ("; is another orbit-server running there? stop it, or pick another --port"
                if exc.errno == errno.EADDRINUSE else "")
        raise OrbitError(ErrorCode.UNAVAILABLE, f"cannot listen on {host}:{port}: "
                                                f"{exc.strerror or exc}{hint}") from None
    sock.set_inheritable(True)
    return sock


__all__ = ["listen_socket"]
