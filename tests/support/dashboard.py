"""The dashboard in a real browser: the system Chromium driven by Playwright, and a scene of
real tasks to show (a real server, a real ``orbit-supervise`` with real children).

    with dashboard_scene(workdir, db_url) as scene:   # server, queue, supervisor, tasks
        with chromium(workdir) as browser:             # one Chromium, a fresh profile
            page, watch = open_page(browser)           # fails on console errors via watch
            sign_in(page, scene.url, scene.admin_bearer)

Used by tests/integration/dashboard and scripts/dashboard_screenshots.py. Every process is
stopped by its PID when the ``with`` ends; Playwright's own browser downloads are never used
(``executable_path`` is the system package's binary).
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from .lanes import Lane
from .orbit_http import OrbitEnv, expect, http_client
from .server import ServerProcess
from .supervisor_helpers import (
    SupervisorProcess,
    attempts,
    submit,
    wait_task,
)
from .waiting import UNIT, wait_until

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
# Playwright's waits, in ms (generous: the machine is shared).
WAIT_MS = int(15_000 * UNIT)


def chromium_missing() -> str | None:
    """Why the browser tests cannot run here, or None."""
    if shutil.which(CHROMIUM) is None:
        return f"{CHROMIUM} is not installed (.ci/run installs the chromium package)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (the test extra)"
    return None


@contextlib.contextmanager
def chromium(workdir: Path | None = None, width: int = 1400,
             height: int = 900) -> Iterator[Any]:
    """One headless Chromium with a fresh user-data-dir (a BrowserContext)."""
    from playwright.sync_api import sync_playwright

    profile = Path(tempfile.mkdtemp(prefix="chromium-", dir=workdir))
    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
            viewport={"width": width, "height": height})
        context.set_default_timeout(WAIT_MS)
        try:
            yield context
        finally:
            context.close()
    shutil.rmtree(profile, ignore_errors=True)


@dataclass
class ConsoleWatch:
    """Console errors and uncaught page errors seen on one page (a test fails on any)."""

    errors: list[str] = field(default_factory=list)

    def on_console(self, message: Any) -> None:
        if message.type == "error":
            self.errors.append(f"console: {message.text} at {message.location}")

    def on_page_error(self, error: Any) -> None:
        self.errors.append(f"pageerror: {error}")


def open_page(context: Any) -> tuple[Any, ConsoleWatch]:
    page = context.new_page()
    watch = ConsoleWatch()
    page.on("console", watch.on_console)
    page.on("pageerror", watch.on_page_error)
    return page, watch


def sign_in(page: Any, url: str, bearer: str) -> None:
    """Open /ui, type the credential into the sign-in form and wait for the overview."""
    page.goto(f"{url}/ui/")
    page.fill("#credential", bearer)
    page.click("#sign-in button[type=submit]")
    page.wait_for_selector("body[data-page=queues] section[data-queue]")


# ------------------------------------------------------------------ the scene


@dataclass
class Scene:
    server: ServerProcess
    env: OrbitEnv
    queue_id: str
    producer: httpx.Client
    supervisor: SupervisorProcess
    succeeded: list[str]
    failed: str
    killed: str    # killed at its attempt timeout (the lease the server granted), in review
    crashed: str   # the child crashed; in review
    unserved: str  # PENDING for a capability no worker offers
    running: str   # a long sleep, RUNNING while the scene lasts

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def admin_bearer(self) -> str:
        return self.env.admin.bearer


def _killed_settled(producer: httpx.Client, task_id: str) -> dict[str, Any] | None:
    """The attempt history once the kill facts of the supervisor's report are on it."""
    history = attempts(producer, task_id)
    atts = history["attempts"]
    return history if atts and atts[-1]["kill_reason"] is not None else None


@contextlib.contextmanager
def dashboard_scene(workdir: Path, db_url: str | None = None) -> Iterator[Scene]:
    """A server with one queue of tasks in every interesting state, and a live worker."""
    workdir.mkdir(parents=True, exist_ok=True)
    server = ServerProcess(workdir / "server", db_url=db_url, session_ttl_ms=3000)
    supervisor: SupervisorProcess | None = None
    env: OrbitEnv | None = None
    try:
        server.start()
        admin = server.bootstrap_admin()
        env = OrbitEnv(server, admin, http_client(server.url, admin.bearer))
        lane = Lane.open(env, "orders")
        queue_id, producer = lane.queue, lane.producer
        creds = lane.credentials_file(workdir / "worker.json", "worker")
        supervisor = SupervisorProcess(workdir, creds, queue_id, workers=2,
                                       extra=("--label", "gpu=a100")).start()
        succeeded = [submit(producer, queue_id, "upper", {"text": f"order {i}"})
                     for i in range(6)]
        failed = submit(producer, queue_id, "reject", {"n": 1}, max_attempts=1)
        # Sleeps far past its attempt timeout: the supervisor kills it at the lease end it
        # was granted (the attempt timeout); non-idempotent, so it waits for a review.
        killed = submit(producer, queue_id, "sleep", {"seconds": 60}, attempt_timeout_ms=600,
                        lease_ttl_ms=2000, max_attempts=1)
        crashed = submit(producer, queue_id, "crash", {"kind": "exit3"}, max_attempts=1)
        unserved = str(expect(producer.post(f"/v1/queues/{queue_id}/tasks", json={
            "handler": "billing.invoice", "handler_version": "v2", "payload_version": "v1",
            "payload": {"order": 7}}), 201)["id"])
        for task_id in [*succeeded, failed, killed, crashed]:
            wait_task(producer, task_id, timeout_s=30)
        wait_until(lambda: _killed_settled(producer, killed), timeout=20,
                   what="the kill facts of the killed attempt")
        running = submit(producer, queue_id, "sleep", {"seconds": 300},
                         attempt_timeout_ms=600_000, lease_ttl_ms=5_000, max_attempts=1)
        wait_task(producer, running, timeout_s=20, until=lambda t: t["state"] == "RUNNING")
        yield Scene(server, env, queue_id, producer, supervisor, succeeded, failed, killed,
                    crashed, unserved, running)
    finally:
        if env is not None:
            env.close()
            env.admin_http.close()
        if supervisor is not None:
            supervisor.stop()
        server.stop()
