"""The commands README.md and docs/*.md tell a reader to run, run: a documented command
cannot break silently.

Every shell block of those documents is marked (tests/support/doc_blocks.py says how): run,
or skipped with its reason. A document's ``run`` blocks run in order in one bash, in a
fresh folder holding a copy of examples/ (the README's "this folder"), with the venv's
commands first on PATH and HOME in the folder (so the default SQLite file is there too);
``8080`` becomes a free port, and ORBIT_URL names it (where `orbit` looks by default).
A document with a block marked ``as=ROLE`` runs against the lane the documents share,
started at the first that needs it: a real orbit-server on that port (SQLite), an admin, a
queue (``$Q``), credentials files (``admin.json``, ``producer.json``, ``worker.json``,
copied into each document's folder) and a real orbit-supervise serving the examples'
handlers on ``$Q``. Every process is stopped by its PID, the ones a script started in the
background included.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from support.doc_blocks import Block, blocks, script
from support.server import ServerProcess, free_port
from support.waiting import UNIT, wait_until

from orbit_client import OrbitClient

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = ROOT / ".venv" / "bin"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SCRIPT_BOUND_S = 60 * UNIT
STOP_BOUND_S = 10 * UNIT


def _blocks(doc: Path) -> list[Block]:
    return blocks(str(doc.relative_to(ROOT)), doc.read_text())


def _runnable(doc: Path) -> bool:
    return any(b.marker is not None and b.marker.action == "run" for b in _blocks(doc))


def test_every_shell_block_is_marked_run_or_skip_with_a_reason() -> None:
    unmarked = [b.where for doc in DOCS for b in _blocks(doc) if b.shell and b.marker is None]
    assert unmarked == [], "mark each: <!-- doc-test: run --> or <!-- doc-test: skip WHY -->"
    for doc in DOCS:
        for block in _blocks(doc):
            if block.marker is not None and block.marker.action == "file":
                assert not block.shell, block.where
    # Each document a reader runs commands from has some that run here.
    shell_docs = {doc for doc in DOCS if any(b.shell for b in _blocks(doc))}
    runs = {doc for doc in shell_docs if _runnable(doc)}
    skipped_whole = {doc.relative_to(ROOT).as_posix() for doc in shell_docs - runs}
    assert skipped_whole <= {"docs/deployment.md", "docs/supervisor.md"}, skipped_whole


LANE_FILES = ("admin.json", "producer.json", "worker.json")


class Lane:
    """The documents' shared lane, started when a document first needs it: one server, its
    admin, a queue, the three credentials files and a worker (examples' handlers) on it."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.port = 0
        self.queue = ""
        self._server: ServerProcess | None = None
        self._worker: subprocess.Popen[bytes] | None = None

    def join(self, work: Path) -> tuple[int, str]:
        """The lane's port and queue, its credentials files copied into ``work``."""
        if self._server is None:
            self._start()
        for name in LANE_FILES:
            shutil.copy2(self.home / name, work / name)
        return self.port, self.queue

    def _start(self) -> None:
        self.port = free_port()
        self._server = server = ServerProcess(self.home / "server", port=self.port).start()
        with OrbitClient(server.url, server.admin(), channel=False) as client:
            self.queue = str(client.create_queue("docs")["id"])
            for role, queues in (("admin", []), ("producer", [self.queue]),
                                 ("worker", [self.queue])):
                client.create_credential(role, queues, f"docs {role}",
                                         path=self.home / f"{role}.json")
        _copy_examples(self.home)
        log_path = self.home / "worker.log"
        with log_path.open("ab") as log:
            self._worker = subprocess.Popen(
                [str(VENV_BIN / "orbit-supervise"), "--credentials-file", "worker.json",
                 "--queue", self.queue, "--workers", "2", "examples.worker.handlers:HANDLERS"],
                cwd=self.home, env=_environment(self.home, self.port), stdout=log,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        wait_until(lambda: "connected to" in log_path.read_text(), timeout=30,
                   what="the lane's worker to connect")

    def stop(self) -> None:
        if self._worker is not None:
            _stop(self._worker.pid)
            self._worker.wait(timeout=STOP_BOUND_S)  # reaped: it is this process's child
        if self._server is not None:
            self._server.stop()


@pytest.fixture(scope="module")
def lane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lane]:
    shared = Lane(tmp_path_factory.mktemp("lane"))
    try:
        yield shared
    finally:
        shared.stop()


def _copy_examples(folder: Path) -> None:
    shutil.copytree(ROOT / "examples", folder / "examples",
                    ignore=shutil.ignore_patterns("__pycache__"))


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    work = tmp_path / "reader"
    _copy_examples(work)
    (tmp_path / "elsewhere").mkdir()
    return work


def _environment(work: Path, port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ORBIT_", "PYTEST_", "XDG_"))}
    env.pop("PYTHONPATH", None)
    env.update(PATH=f"{VENV_BIN}:{env.get('PATH', '/usr/bin:/bin')}", HOME=str(work),
               NO_COLOR="1", ORBIT_URL=f"http://127.0.0.1:{port}")
    if os.environ.get("PYTEST_XDIST_WORKER"):  # free_port's blocks per worker
        env["PYTEST_XDIST_WORKER"] = os.environ["PYTEST_XDIST_WORKER"]
    return env


def _stop(pid: int) -> None:
    """SIGTERM by PID, then SIGKILL after a bound; a process already gone (or a zombie: an
    orphan of the script waits for its reaper) is fine."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        try:
            wait_until(lambda: not _running(pid), timeout=STOP_BOUND_S / UNIT, interval=0.05,
                       what=f"process {pid} to end")
            return
        except AssertionError:
            continue


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.parametrize("doc", [d for d in DOCS if _runnable(d)],
                         ids=lambda d: d.relative_to(ROOT).as_posix())
def test_documented_commands_run(doc: Path, workdir: Path, lane: Lane) -> None:
    found = _blocks(doc)
    queue = None
    if any(b.marker is not None and "as" in b.marker.options for b in found):
        port, queue = lane.join(workdir)
    else:
        port = free_port()
    env = _environment(workdir, port)
    if queue is not None:
        env["Q"] = queue
    pids = workdir.parent / "background.pids"
    text = script(found, port=port, pids_file=str(pids),
                  elsewhere=str(workdir.parent / "elsewhere"),
                  python=str(VENV_BIN / "python"))
    (workdir.parent / "doc.sh").write_text(text)
    started = time.monotonic()
    proc = subprocess.Popen(["bash", str(workdir.parent / "doc.sh")], cwd=workdir, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, start_new_session=True, text=True)
    try:
        out, err = proc.communicate(timeout=SCRIPT_BOUND_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the script's own group: it and its children
        out, err = proc.communicate(timeout=STOP_BOUND_S)
        pytest.fail(f"{doc.name}: still running after {SCRIPT_BOUND_S} s\n{err[-6000:]}")
    finally:
        background = [int(p) for p in pids.read_text().split()] if pids.exists() else []
        for pid in background:
            _stop(pid)
    assert proc.returncode == 0, f"{doc.name}:\n{err[-6000:]}\n--- stdout\n{out[-3000:]}"
    assert time.monotonic() - started < SCRIPT_BOUND_S
