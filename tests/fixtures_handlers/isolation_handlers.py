"""A handler that tries to reach the worker's secrets (tests/integration/supervisor/
test_handler_isolation.py). It imports only what the template has already loaded, so it
also runs as a user that cannot read the Python installation.

``sup.probe`` payload: ``{"supervisor_pid", "credentials_file", "secret"}``; the answer
says, for each way in, whether it worked ("read", with whether the secret was in it) or
which error stopped it.
"""

from __future__ import annotations

import os
import resource
from typing import Any

from orbit_child import Execution, Handler


def _try_read(path: str, secret: str, *, offset: int | None = None) -> str:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        return f"refused:{exc.errno}"
    try:
        if offset is not None:
            os.lseek(fd, offset, os.SEEK_SET)
        data = os.read(fd, 1 << 20)
    except OSError as exc:
        return f"opened-but-refused:{exc.errno}"
    finally:
        os.close(fd)
    return "read-with-secret" if secret.encode() in data else "read"


def _first_mapping(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/maps") as fh:
            return int(fh.readline().split("-")[0], 16)
    except (OSError, ValueError):
        return None


def probe(execution: Execution) -> Any:
    p = execution.payload
    sup, secret = int(p["supervisor_pid"]), str(p["secret"])
    template = os.getppid()
    fds = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            fds[name] = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
    return {
        "uid": os.getuid(),
        "supervisor_environ": _try_read(f"/proc/{sup}/environ", secret),
        "supervisor_mem": _try_read(f"/proc/{sup}/mem", secret,
                                    offset=_first_mapping(sup) or 0),
        "template_environ": _try_read(f"/proc/{template}/environ", secret),
        "credentials_file": _try_read(str(p["credentials_file"]), secret),
        "own_environ_has_secret": any(secret in v for v in os.environ.values()),
        "fds": fds,
        "limits": {
            "as": resource.getrlimit(resource.RLIMIT_AS)[0],
            "cpu": resource.getrlimit(resource.RLIMIT_CPU)[0],
            "nofile": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
        },
    }


HANDLERS = [Handler("sup.probe", "v1", "v1", probe)]
