"""Screenshots of every dashboard page into docs/images/ (shown in docs/observability.md).

The same scene as the browser tests (tests/support/dashboard.py): a real orbit-server on a
SQLite file in a temporary folder, a real orbit-supervise with real children, tasks in every
state, and the system Chromium driven by Playwright.

    .venv/bin/python scripts/dashboard_screenshots.py [--out docs/images]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests")]

from support.dashboard import Scene, chromium, dashboard_scene, open_page, sign_in  # noqa: E402
from support.supervisor_helpers import submit  # noqa: E402

STREAM_S = 12.0  # tasks submitted over this long, so the per-second throughput has a shape


def _stream(scene: Scene) -> None:
    """A few tasks every half second, some rejected, for the throughput chart."""
    end = time.monotonic() + STREAM_S
    n = 0
    while time.monotonic() < end:
        for _ in range(1 + n % 4):
            submit(scene.producer, scene.queue_id, "upper", {"text": f"stream {n}"})
        if n % 5 == 2:
            submit(scene.producer, scene.queue_id, "reject", {"n": n}, max_attempts=1)
        n += 1
        time.sleep(0.5)
    time.sleep(1.0)  # the last ones finish


def _shot(page: Any, scene: Scene, route: str, ready: str, path: Path) -> None:
    page.goto(f"{scene.url}/ui/#/{route}")
    page.wait_for_function("() => document.body.dataset.route === location.hash")
    page.wait_for_selector(ready)
    page.screenshot(path=str(path), full_page=True)
    print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images")
    args = parser.parse_args()
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="orbit-dashboard-") as tmp:
        work = Path(tmp)
        with dashboard_scene(work) as scene, chromium(work, width=1280, height=800) as browser:
            page, watch = open_page(browser)
            page.goto(f"{scene.url}/ui/")
            page.wait_for_selector("#credential")
            page.screenshot(path=str(out / "dashboard-sign-in.png"))
            sign_in(page, scene.url, scene.admin_bearer)
            q = scene.queue_id
            _stream(scene)
            _shot(page, scene, "queues?span=1000", f"section[data-queue='{q}'] svg",
                  out / "dashboard-queues.png")
            _shot(page, scene, f"tasks?queue={q}", "#task-table tbody tr",
                  out / "dashboard-tasks.png")
            _shot(page, scene, f"task/{scene.killed}", "#attempts td[data-kill-reason]",
                  out / "dashboard-task-killed.png")
            _shot(page, scene, f"review?queue={q}", "#review-table tbody tr",
                  out / "dashboard-review.png")
            _shot(page, scene, "workers", f"#workers a[data-task='{scene.running}']",
                  out / "dashboard-workers.png")
            if watch.errors:
                print("\n".join(watch.errors), file=sys.stderr)
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
