"""The real `orbit` command as a subprocess, on pipes or on a pseudo-terminal.

    run_orbit("tasks", "get", ID, env=...)        stdout/stderr are pipes (JSON by default)
    run_orbit_tty("tasks", "get", ID, env=...)    stdin, stdout and stderr are one pty
    Cli(creds_file).ok(...) / .json(...) / .fails(code, exit, ...)
    Cli.producer_of(lane, tmp_path)               `orbit` as a support.lanes Lane's producer

Every run has a clean environment (no ORBIT_* leaking in from outside) and a bound in time.
"""

from __future__ import annotations

import os
import re
import select
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from .lanes import Lane
from .waiting import UNIT

ORBIT = Path(sys.executable).with_name("orbit")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")


def clean_env(env: dict[str, str] | None) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("ORBIT_")}
    return {**base, **(env or {})}


def run_orbit(
    *args: str, env: dict[str, str] | None = None, stdin: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run `orbit ARGS`; ``timeout`` in units."""
    return subprocess.run(
        [str(ORBIT), *args], env=clean_env(env), input=stdin, capture_output=True, text=True,
        timeout=timeout * UNIT, check=False,
    )


@dataclass
class TtyResult:
    returncode: int
    raw: str  # everything written to the terminal, escape sequences included

    @property
    def text(self) -> str:
        """What a person reads: the output without colours and cursor moves."""
        return _ANSI.sub("", self.raw)


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def spawn_tty(
    *args: str, env: dict[str, str] | None = None, columns: int = 160
) -> tuple[subprocess.Popen[bytes], int]:
    """Start `orbit ARGS` on a new pseudo-terminal; returns the process and the terminal's
    master side (the caller closes it, and stops the process by its PID)."""
    master, slave = os.openpty()
    environ = clean_env({"TERM": "xterm-256color", "COLUMNS": str(columns), **(env or {})})
    environ.pop("NO_COLOR", None)
    try:
        # A shell's Ctrl-C: the command gets SIGINT's default disposition even where this
        # process ignores it (pytest-xdist workers do, and an ignored SIGINT is inherited).
        proc = subprocess.Popen([str(ORBIT), *args], stdin=slave, stdout=slave, stderr=slave,
                                env=environ, close_fds=True, preexec_fn=_default_sigint)
    finally:
        os.close(slave)
    return proc, master


def read_until(master: int, marker: str, timeout: float = 30) -> str:
    """Read the terminal until ``marker`` shows (bounded; ``timeout`` in units)."""
    seen = b""
    deadline = time.monotonic() + timeout * UNIT
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.1)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:
                break
            if not data:
                break
            seen += data
            if marker in _ANSI.sub("", seen.decode(errors="replace")):
                return seen.decode(errors="replace")
    raise AssertionError(f"{marker!r} did not show within {timeout} units: {seen[-500:]!r}")


def run_orbit_tty(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60, columns: int = 160
) -> TtyResult:
    """Run `orbit ARGS` on a pseudo-terminal (as a person at a shell would); ``timeout`` in
    units. The process is killed by its PID if it outlives the bound."""
    proc, master = spawn_tty(*args, env=env, columns=columns)
    try:
        return read_to_exit(proc, master, timeout)
    finally:
        os.close(master)


def read_to_exit(proc: subprocess.Popen[bytes], master: int, timeout: float = 60) -> TtyResult:
    """Read the terminal until the process ends, as a terminal would (a writer never blocks
    on a full buffer); ``timeout`` in units, then the process is killed by its PID."""
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout * UNIT
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.1)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: every writer closed the terminal
                    break
                if not data:
                    break
                chunks.append(data)
            elif proc.poll() is not None:
                break
        else:
            raise AssertionError(f"{proc.args} did not end within {timeout} units")
        returncode = proc.wait(timeout=10 * UNIT)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10 * UNIT)
    return TtyResult(returncode, b"".join(chunks).decode(errors="replace"))


def closed_port_url() -> str:
    """A URL nobody listens on: bind port 0, note it, close it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def one_error_line(result: subprocess.CompletedProcess[str], code: str) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"orbit: {code}: "), lines[0]
    return lines[0]


class Cli:
    """`orbit` bound to one credentials file (ORBIT_CREDENTIALS_FILE, as the README does)."""

    def __init__(self, creds_file: Path) -> None:
        self.env = {"ORBIT_CREDENTIALS_FILE": str(creds_file)}

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return run_orbit(*args, env=self.env)

    def ok(self, *args: str) -> str:
        result = self.run(*args)
        assert result.returncode == 0, result.stderr
        assert result.stderr == ""
        return result.stdout

    def json(self, *args: str) -> Any:
        return orjson.loads(self.ok(*args))

    def json_exit(self, exit_code: int, *args: str) -> Any:
        """The JSON answer of a command expected to end with ``exit_code`` and no error."""
        result = self.run(*args)
        assert result.returncode == exit_code, (result.returncode, result.stderr)
        assert result.stderr == ""
        return orjson.loads(result.stdout)

    def fails(self, code: str, exit_code: int, *args: str) -> str:
        result = self.run(*args)
        assert result.returncode == exit_code, (result.returncode, result.stderr)
        assert result.stdout == ""
        return one_error_line(result, code)

    def tty(self, *args: str, timeout: float = 60) -> TtyResult:
        return run_orbit_tty(*args, env=self.env, timeout=timeout)

    @classmethod
    def producer_of(cls, lane: Lane, directory: Path) -> Cli:
        """`orbit` as ``lane``'s producer (its credentials file written in ``directory``)."""
        return cls(lane.credentials_file(directory / f"producer-{lane.queue}.json"))
