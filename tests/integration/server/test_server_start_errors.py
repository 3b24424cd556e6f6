"""A real `orbit-server serve` that cannot start says why in one line, naming what is in the
way: a port in use (before any "serving on" line, the database untouched), a database folder
it cannot write (the path and the -wal file, not SQLite's "readonly database")."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.server import free_port, server_command
from support.waiting import UNIT

START_BOUND_S = 60 * UNIT


def _serve(db: Path, port: int, workdir: Path) -> subprocess.CompletedProcess[str]:
    """``orbit-server serve`` expected to fail: bounded, and killed by the timeout if not."""
    return subprocess.run(
        [*server_command(), "serve", "--db", f"sqlite:///{db}", "--host", "127.0.0.1",
         "--port", str(port)],
        capture_output=True, text=True, timeout=START_BOUND_S, cwd=workdir,
        stdin=subprocess.DEVNULL)


def test_a_port_in_use_fails_before_serving_is_announced(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        db = tmp_path / "data" / "orbit.db"
        done = _serve(db, port, tmp_path)
    assert done.returncode == 1, done.stderr
    assert "serving on" not in done.stderr, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in line, line
    assert "--port" in line  # what to do about it
    assert not db.exists()  # bound first: nothing was created or migrated


@contextlib.contextmanager
def _unwritable(folder: Path) -> Iterator[None]:
    """``folder`` refuses new files: chmod for a user, the immutable flag for root (whom
    permissions do not stop); the test skips where neither is possible."""
    if os.geteuid() != 0:
        folder.chmod(0o500)
        try:
            yield
        finally:
            folder.chmod(0o700)
        return
    made = subprocess.run(["chattr", "+i", str(folder)], capture_output=True, text=True,
                          timeout=10)
    if made.returncode != 0:
        pytest.skip(f"root, and chattr +i is not possible here: {made.stderr.strip()}")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=True, timeout=10)


def test_a_database_folder_the_server_cannot_write_is_named_with_the_cause(
        tmp_path: Path) -> None:
    folder = tmp_path / "data"
    db = folder / "orbit.db"
    migrated = subprocess.run([*server_command(), "migrate", "--db", f"sqlite:///{db}"],
                              capture_output=True, text=True, timeout=START_BOUND_S,
                              cwd=tmp_path)
    assert migrated.returncode == 0, migrated.stderr
    assert not (folder / "orbit.db-wal").exists()  # closed cleanly: SQLite must make it again
    with _unwritable(folder):
        done = _serve(db, free_port(), tmp_path)
    assert done.returncode == 1, done.stderr
    assert "serving on" not in done.stderr, done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert f"cannot create files in the database folder {folder}" in line, done.stderr
    assert "orbit.db-wal" in line and "readonly database" not in line, line
