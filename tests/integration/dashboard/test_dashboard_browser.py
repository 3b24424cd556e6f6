"""The dashboard at /ui in a real headless Chromium (tests/support/dashboard.py), on a real
server (SQLite, and MariaDB when ORBIT_TEST_MYSQL_URL is set) with a real orbit-supervise.

One browser for the module and one scene per store; every test ends by checking that the
page logged no console error and threw no uncaught error.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.dashboard import (
    ConsoleWatch,
    Scene,
    chromium,
    chromium_missing,
    dashboard_scene,
    open_page,
    sign_in,
)
from support.mariadb import MariaDBPool, must_run, require_mariadb
from support.orbit_http import expect
from support.protocol_client import ProtocolClient

from orbit_server.dashboard import CSP
from orbit_wire.frames import Progress, RenewOp
from orbit_wire.model import Capability

# A capability only the progress test's scripted worker offers.
_PROGRESS_CAP = Capability("report.progress", "v1", "v1")

# xdist_group: one xdist worker runs the module, so its module-scoped browser and servers
# start once.
pytestmark = [pytest.mark.timeout(120), pytest.mark.xdist_group("dashboard_browser")]


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    reason = chromium_missing()
    if reason is not None:
        if must_run():
            pytest.fail(f"CI=true and the browser tests cannot run: {reason}")
        pytest.skip(reason)
    with chromium(tmp_path_factory.mktemp("chromium")) as context:
        yield context


@pytest.fixture(scope="module", params=["sqlite", "mariadb"])
def scene(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
          mariadb_pool: MariaDBPool | None) -> Iterator[Scene]:
    db_url = None
    if request.param == "mariadb":
        require_mariadb()
        assert mariadb_pool is not None
        db_url = mariadb_pool.acquire()
    try:
        with dashboard_scene(tmp_path_factory.mktemp(f"scene-{request.param}"),
                             db_url) as made:
            yield made
    finally:
        if db_url is not None and mariadb_pool is not None:
            mariadb_pool.release(db_url)


@pytest.fixture(scope="module")
def signed_in(browser: Any, scene: Scene) -> Iterator[tuple[Any, ConsoleWatch]]:
    page, watch = open_page(browser)
    sign_in(page, scene.url, scene.admin_bearer)
    yield page, watch
    page.close()


@pytest.fixture
def page(signed_in: tuple[Any, ConsoleWatch]) -> Iterator[Any]:
    page, watch = signed_in
    yield page
    assert watch.errors == [], watch.errors


def _goto(page: Any, scene: Scene, route: str, ready: str) -> None:
    page.goto(f"{scene.url}/ui/#/{route}")
    _shown(page)
    page.wait_for_selector(ready)


def _shown(page: Any) -> None:
    """Wait until the page shows the route in the address bar (not the one before)."""
    page.wait_for_function("() => document.body.dataset.route === location.hash")


def _task_rows(page: Any) -> list[str]:
    _shown(page)
    return list(page.eval_on_selector_all("#task-table tbody tr",
                                          "rows => rows.map(r => r.dataset.taskRow)"))


def test_sign_in_keeps_the_credential_in_session_storage(page: Any, scene: Scene) -> None:
    stored = page.evaluate("sessionStorage.getItem('orbit.credential')")
    assert stored == scene.admin_bearer
    secret = scene.admin_bearer.partition(".")[2]
    assert secret not in page.url
    assert page.evaluate("document.cookie") == ""
    assert page.text_content("#who").startswith("admin ")


def test_overview_shows_counts_workers_unserved_and_throughput(page: Any, scene: Scene) -> None:
    _goto(page, scene, "queues", f"section[data-queue='{scene.queue_id}']")
    card = page.locator(f"section[data-queue='{scene.queue_id}']")
    stats = expect(scene.producer.get(f"/v1/queues/{scene.queue_id}/stats"), 200)
    for state in ("SUCCEEDED", "FAILED", "NEEDS_REVIEW", "PENDING"):
        count = card.locator(f"[data-count={state}] b")
        assert count.text_content() == str(stats["counts"][state]), state
    assert "billing.invoice@v2/v1 (1 pending)" in card.locator("[data-unserved]").text_content()
    assert card.locator("[data-fact='live workers']").text_content().startswith("1 ")
    chart = card.locator("svg[data-chart=throughput]")
    # The six upper tasks, the rejected one and anything resolved before this test.
    assert int(chart.get_attribute("data-total")) >= 7
    assert chart.locator("rect.bar-SUCCEEDED").count() >= 1
    # Per second over the last minute: 60 windows of the same tasks (all finished lately).
    page.select_option("select[name=span]", "1000")
    page.wait_for_function("() => location.hash.includes('span=1000')")
    _shown(page)
    assert "1.00 s per bar" in chart.text_content()


def test_task_list_filters_by_state_and_capability_and_pages(page: Any, scene: Scene) -> None:
    _goto(page, scene, f"tasks?queue={scene.queue_id}", "#task-table")
    page.select_option("#task-filters select[name=state]", "FAILED")
    page.click("#task-filters button[type=submit]")
    page.wait_for_function("() => location.hash.includes('state=FAILED')")
    assert _task_rows(page) == [scene.failed]

    # Finished within the last 5 minutes: only the tasks that ended (not those in review).
    page.select_option("#task-filters select[name=state]", "")
    page.select_option("#task-filters select[name=finished_within]", "300000")
    page.click("#task-filters button[type=submit]")
    page.wait_for_function("() => location.hash.includes('finished_within=300000')")
    assert sorted(_task_rows(page)) == sorted([*scene.succeeded, scene.failed])

    page.select_option("#task-filters select[name=finished_within]", "")
    page.fill("#task-filters input[name=capability]", "sup.upper@v1/v1")
    page.select_option("#task-filters select[name=limit]", "5")
    page.click("#task-filters button[type=submit]")
    page.wait_for_function("() => document.querySelector('#page-info')?.textContent"
                           ".startsWith('page 1, 5 task')")
    first = _task_rows(page)
    page.click("#next-page")
    page.wait_for_function("() => document.querySelector('#page-info')?.textContent"
                           ".startsWith('page 2, 1 task')")
    second = _task_rows(page)
    assert sorted(first + second) == sorted(scene.succeeded)
    assert page.locator("#next-page").is_disabled()
    page.click("#prev-page")
    page.wait_for_function("() => document.querySelector('#page-info')?.textContent"
                           ".startsWith('page 1, 5 task')")
    assert _task_rows(page) == first


def test_killed_task_page_shows_its_kill_reason_and_timeline(page: Any, scene: Scene) -> None:
    (att,) = expect(scene.producer.get(f"/v1/tasks/{scene.killed}/attempts"), 200)["attempts"]
    assert att["kill_reason"] in ("ATTEMPT_TIMEOUT", "LEASE_LOST"), att
    _goto(page, scene, f"task/{scene.killed}", "#attempts td[data-kill-reason]")
    cell = page.locator(f"#attempts tr[data-attempt-row='{att['id']}'] td[data-kill-reason]")
    assert cell.text_content() == att["kill_reason"]
    row = page.locator(f"#attempts tr[data-attempt-row='{att['id']}']").text_content()
    assert str(att["child_pid"]) in row and f"signal {att['signal']}" in row
    assert att["decision_rule"] in row
    timeline = page.locator(f"svg[data-chart=timeline] g[data-attempt='{att['id']}']")
    assert timeline.locator("line.kill").count() == 1
    assert timeline.locator("rect.lease").count() == 1
    assert f"kill: {att['kill_reason']}" in timeline.text_content()


def test_review_from_the_queue_is_in_the_audit_and_data_stays_text(page: Any,
                                                                  scene: Scene) -> None:
    _goto(page, scene, f"review?queue={scene.queue_id}", "#review-table")
    row = page.locator(f"#review-table tr[data-task-row='{scene.crashed}']")
    reason = "checked by ops <img src=x id=injected> & closed"
    row.locator("input[name=reason]").fill(reason)
    row.locator("button[data-action=fail]").click()
    row.wait_for(state="detached")
    assert "FAILED" in page.text_content("#status")

    _goto(page, scene, f"task/{scene.crashed}", "#audit tr[data-audit=task_reviewed]")
    reviewed = page.locator("#audit tr[data-audit=task_reviewed]")
    text = reviewed.text_content()
    assert f"operator:{scene.env.admin.credential_id}" in text
    assert "NEEDS_REVIEW → FAILED" in text and reason in text
    assert page.locator("#injected").count() == 0  # the reason stayed text
    assert page.locator("h1 .state").text_content() == "FAILED"
    events = expect(scene.producer.get(f"/v1/tasks/{scene.crashed}/audit"), 200)["events"]
    assert events[-1]["kind"] == "task_reviewed" and events[-1]["to_state"] == "FAILED"


def test_task_page_marks_succeeded_with_a_result(page: Any, scene: Scene) -> None:
    _goto(page, scene, f"task/{scene.killed}", "[data-review] button[data-action=succeed]")
    controls = page.locator(f"[data-review='{scene.killed}']")
    controls.locator("input[name=result]").fill('{"checked": true}')
    controls.locator("button[data-action=succeed]").click()
    page.wait_for_selector("#audit tr[data-audit=task_reviewed]")
    assert page.locator("h1 .state").text_content() == "SUCCEEDED"
    assert '"checked": true' in page.locator("[data-fact=result]").text_content()
    # The kill facts of the attempt stay on the page after the review.
    assert page.locator("#attempts td[data-kill-reason]").first.text_content() in (
        "ATTEMPT_TIMEOUT", "LEASE_LOST")
    task = expect(scene.producer.get(f"/v1/tasks/{scene.killed}"), 200)
    assert (task["state"], task["result"]) == ("SUCCEEDED", {"checked": True})


def test_task_page_retries_a_cancelled_task(page: Any, scene: Scene) -> None:
    made = expect(scene.producer.post(f"/v1/queues/{scene.queue_id}/tasks", json={
        "handler": "billing.invoice", "handler_version": "v2", "payload_version": "v1",
        "payload": {"order": 9}}), 201)
    task_id = made["id"]
    expect(scene.producer.post(f"/v1/tasks/{task_id}/cancel", json={}), 200)
    _goto(page, scene, f"task/{task_id}", "[data-retry] button[data-action=rerun]")
    controls = page.locator(f"[data-retry='{task_id}']")
    controls.locator("input[name=reason]").fill("customer asked again")
    controls.locator("button[data-action=rerun]").click()
    page.wait_for_selector("#audit tr[data-audit=task_retried]")
    assert page.locator("h1 .state").text_content() == "PENDING"
    retried = page.locator("#audit tr[data-audit=task_retried]").text_content()
    assert "CANCELLED → PENDING" in retried and "customer asked again" in retried
    assert page.locator("[data-retry]").count() == 0  # no retry for a PENDING task
    task = expect(scene.producer.get(f"/v1/tasks/{task_id}"), 200)
    assert task["state"] == "PENDING"
    expect(scene.producer.post(f"/v1/tasks/{task_id}/cancel", json={}), 200)  # as it was


def test_task_list_bulk_cancel_shows_the_count_before_it_acts(page: Any, scene: Scene) -> None:
    made = expect(scene.producer.post(f"/v1/queues/{scene.queue_id}/tasks/batch", json={
        "tasks": [{"handler": "bulk.nobody", "handler_version": "v1", "payload_version": "v1",
                   "payload": {"n": n}} for n in range(2)]}), 201)["tasks"]
    _goto(page, scene, f"tasks?queue={scene.queue_id}&capability=bulk.nobody", "#bulk-bar")
    page.select_option("#bulk-bar select[name=bulk-action]", "cancel")
    page.fill("#bulk-bar input[name=bulk-reason]", "from the dashboard")
    page.click("#bulk-count-button")
    page.wait_for_function("() => document.querySelector('#bulk-count')?.dataset.matched"
                           " === '2'")
    assert "2 task(s) match" in page.text_content("#bulk-count")
    # Counted, not changed: the cancel waits for its confirmation.
    assert {expect(scene.producer.get(f"/v1/tasks/{t['id']}"), 200)["state"]
            for t in made} == {"PENDING"}
    page.click("#bulk-confirm")
    page.wait_for_function("() => (document.querySelector('#status')?.textContent || '')"
                           ".includes('cancel: 2 of 2')")
    for task in made:
        assert expect(scene.producer.get(f"/v1/tasks/{task['id']}"), 200)["state"] == "CANCELLED"
        events = expect(scene.producer.get(f"/v1/tasks/{task['id']}/audit"), 200)["events"]
        assert events[-1]["detail"] == {"reason": "from the dashboard", "bulk": True}


def test_a_queue_card_pauses_and_resumes_a_capability(page: Any, scene: Scene) -> None:
    _goto(page, scene, "queues", f"section[data-queue='{scene.queue_id}'] [data-pauses]")
    card = page.locator(f"section[data-queue='{scene.queue_id}']")
    card.locator("input[name=pause-handler]").fill("bulk.nobody")
    card.locator("input[name=pause-reason]").fill("dashboard pause")
    card.locator("button[data-action=pause]").click()
    paused = page.locator(f"section[data-queue='{scene.queue_id}'] li[data-handler='bulk.nobody']")
    paused.wait_for()
    assert "dashboard pause" in paused.text_content()
    answer = expect(scene.producer.get(f"/v1/queues/{scene.queue_id}/pauses"), 200)
    assert [(p["scope"], p["handler"]) for p in answer["paused"]] == [
        ("capability", "bulk.nobody")]
    paused.locator("button[data-action=resume]").click()
    paused.wait_for(state="detached")
    assert expect(scene.producer.get(f"/v1/queues/{scene.queue_id}/pauses"),
                  200)["paused"] == []


def test_schedules_page_shows_the_next_five_fire_times(page: Any, scene: Scene) -> None:
    made = expect(scene.producer.post(f"/v1/queues/{scene.queue_id}/schedules", json={
        "cron": "0 9 * * *", "timezone": "Europe/Paris", "name": "morning", "paused": True,
        "task": {"handler": "billing.invoice", "handler_version": "v2",
                 "payload_version": "v1", "payload": {}}}), 201)
    try:
        _goto(page, scene, f"schedules?queue={scene.queue_id}",
              f"#schedule-table tr[data-schedule='{made['id']}']")
        shown = page.locator(f"[data-fires='{made['id']}'] li")
        view = expect(scene.producer.get(f"/v1/schedules/{made['id']}"), 200)
        assert [int(li.get_attribute("data-at")) for li in shown.all()] == [
            f["at_ms"] for f in view["next_fires"]]
        texts = [li.text_content() for li in shown.all()]
        assert len(texts) == 5 and all("T09:00:00+0" in t for t in texts), texts
    finally:
        expect(scene.producer.delete(f"/v1/schedules/{made['id']}"), 200)


def test_limits_page_lists_the_queue_limits(page: Any, scene: Scene) -> None:
    admin = scene.env.admin_http
    base = f"/v1/queues/{scene.queue_id}/limits"
    expect(admin.put(f"{base}/customer:*", json={
        "max_running": 3, "rate": {"count": 10, "interval_ms": 1000}}), 201)
    try:
        _goto(page, scene, f"limits?queue={scene.queue_id}",
              "#limit-table tr[data-limit='customer:*']")
        row = page.locator("#limit-table tr[data-limit='customer:*']").text_content()
        assert "each key its own limit" in row and "10 per 1000 ms" in row, row
    finally:
        expect(admin.delete(f"{base}/customer:*"), 200)


def test_a_queue_card_shows_fair_dispatch(page: Any, scene: Scene) -> None:
    admin = scene.env.admin_http
    base = f"/v1/queues/{scene.queue_id}/fair"
    expect(admin.put(base, json={"key": "customer"}), 200)
    try:
        _goto(page, scene, "queues", f"section[data-queue='{scene.queue_id}'] [data-fair]")
        shown = page.locator(f"section[data-queue='{scene.queue_id}'] [data-fair]")
        assert shown.text_content() == "turns by customer"
    finally:
        expect(admin.delete(base), 200)


def test_workers_page_lists_the_running_attempt(page: Any, scene: Scene) -> None:
    _goto(page, scene, "workers", "#workers tbody tr")
    # The long sleep shows up among the running attempts (auto-refresh brings it if the
    # first render came before its start).
    page.wait_for_selector(f"#workers a[data-task='{scene.running}']")
    row = page.locator("#workers tbody tr").first.text_content()
    assert "orbit-supervise/" in row and "sup.upper@v1/v1" in row
    # Its labels (orbit-supervise --label gpu=a100).
    labels = page.locator("#workers tbody tr").first.locator("td[data-labels]")
    assert labels.get_attribute("data-labels") == "gpu=a100"


def test_auto_refresh_shows_a_new_task_without_reload(page: Any, scene: Scene) -> None:
    _goto(page, scene, "queues", f"section[data-queue='{scene.queue_id}']")
    pending = page.locator(f"section[data-queue='{scene.queue_id}'] [data-count=PENDING] b")
    before = int(pending.text_content())
    expect(scene.producer.post(f"/v1/queues/{scene.queue_id}/tasks", json={
        "handler": "billing.invoice", "handler_version": "v2", "payload_version": "v1",
        "payload": {"order": 8}}), 201)
    page.wait_for_function(
        "([sel, n]) => Number(document.querySelector(sel)?.textContent) > n",
        arg=[f"section[data-queue='{scene.queue_id}'] [data-count=PENDING] b", before])


def test_ui_responses_carry_a_strict_csp_and_no_inline_script(scene: Scene) -> None:
    with httpx.Client(base_url=scene.url, timeout=10) as client:
        index = client.get("/ui/")
        assert index.status_code == 200
        assert index.headers["content-security-policy"] == CSP
        assert "'unsafe-inline'" not in CSP and "script-src 'self'" in CSP
        assert index.headers["x-content-type-options"] == "nosniff"
        assert re.findall(r"<script(?![^>]*\bsrc=)", index.text) == []
        script = client.get("/ui/app.js")
        assert script.headers["content-type"].startswith("text/javascript")
        assert script.headers["content-security-policy"] == CSP
        redirect = client.get("/ui", follow_redirects=False)
        assert (redirect.status_code, redirect.headers["location"]) == (308, "/ui/")
        missing = client.get("/ui/../orbit.db")
        assert missing.status_code == 404
        assert client.get("/ui/nope.js").json()["error"]["code"] == "NOT_FOUND"
        # The assets never hold markup built from strings.
        for name in ("app.js", "pages.js", "charts.js", "dom.js", "api.js", "schedules.js",
                     "flow.js", "limits.js"):
            assert "innerHTML" not in client.get(f"/ui/{name}").text, name


def test_the_api_endpoints_the_dashboard_adds(scene: Scene, tmp_path: Path) -> None:
    me = expect(scene.producer.get("/v1/me"), 200)
    assert me["role"] == "producer" and me["queues"] == [scene.queue_id]
    worker = scene.env.worker_credential(scene.queue_id)
    with httpx.Client(base_url=scene.url, timeout=10,
                      headers={"Authorization": f"Bearer {worker.bearer}"}) as as_worker:
        assert as_worker.get("/v1/me").json()["error"]["code"] == "PERMISSION_DENIED"
    tp = expect(scene.producer.get(f"/v1/queues/{scene.queue_id}/throughput",
                                   params={"window_ms": 3_600_000, "windows": 2}), 200)
    assert [w["from_at_ms"] for w in tp["windows"]] == [
        tp["until_at_ms"] - 2 * 3_600_000, tp["until_at_ms"] - 3_600_000]
    last = tp["windows"][-1]["counts"]
    assert last["SUCCEEDED"] >= len(scene.succeeded) and last["FAILED"] >= 1
    bad = scene.producer.get(f"/v1/queues/{scene.queue_id}/throughput",
                             params={"windows": 0})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "BAD_REQUEST"
    other = scene.env.queue()
    hidden = scene.producer.get(f"/v1/queues/{other}/throughput")
    assert hidden.status_code == 404, hidden.text  # as a queue that does not exist


def test_a_producer_sees_its_queue_and_a_worker_is_refused(browser: Any, scene: Scene) -> None:
    scene.env.queue("elsewhere")  # another queue, which the producer must not see
    made = scene.env.credential("producer", [scene.queue_id])
    page, watch = open_page(browser)
    try:
        sign_in(page, scene.url, f"{made['credential_id']}.{made['secret']}")
        assert [c.get_attribute("data-queue") for c in page.locator("section[data-queue]")
                .all()] == [scene.queue_id]
        assert page.text_content("#who").startswith("producer ")
        assert watch.errors == [], watch.errors
    finally:
        page.close()
    worker = scene.env.worker_credential(scene.queue_id)
    page, _refused = open_page(browser)  # the 403 is logged by the browser: not watched
    try:
        page.goto(f"{scene.url}/ui/")
        page.fill("#credential", worker.bearer)
        page.click("#sign-in button[type=submit]")
        page.wait_for_selector("#sign-in-error:has-text('PERMISSION_DENIED')")
        assert page.evaluate("sessionStorage.getItem('orbit.credential')") is None
        assert page.locator("#nav").is_hidden()
    finally:
        page.close()


async def _report_progress(scene: Scene, task_id: str) -> str:
    """A scripted worker (its own capability, so the scene's supervisor never takes it)
    starts the task and renews with progress; returns the attempt ID."""
    worker = scene.env.worker_credential(scene.queue_id)
    async with await ProtocolClient.connect(scene.server.ws_url) as wc:
        await wc.hello_as(worker, capacity=1, capabilities=(_PROGRESS_CAP,))
        await wc.credit(1)
        [res] = await wc.reservations(1)
        assert res.task_id == task_id and (await wc.start(res)).ok
        renew = RenewOp(wc.msg_id(), res.attempt_id, res.epoch,
                        progress=Progress(0.6, '{"rows": 600, "note": "<b>x</b>"}'))
        assert (await wc.one(renew)).ok
        return res.attempt_id


def test_task_page_shows_an_attempts_progress_as_a_bar(page: Any, scene: Scene) -> None:
    made = expect(scene.producer.post(f"/v1/queues/{scene.queue_id}/tasks", json={
        **_PROGRESS_CAP.to_dict(), "payload": {"n": 1}, "max_attempts": 1,
        "progress_timeout_ms": 45_000}), 201)
    # Playwright's sync API holds this thread's event loop: the worker runs on its own.
    with ThreadPoolExecutor(1) as pool:
        attempt_id = pool.submit(asyncio.run, _report_progress(scene, made["id"])).result(60)
    _goto(page, scene, f"task/{made['id']}", "#attempts [data-progress]")
    cell = page.locator(f"#attempts tr[data-attempt-row='{attempt_id}'] [data-progress]")
    assert cell.get_attribute("data-progress") == "0.6"
    assert cell.locator("progress").get_attribute("value") == "0.6"
    text = cell.text_content()
    assert "60%" in text and '"rows": 600' in text and "<b>x</b>" in text  # details as text
    assert cell.locator("b").count() == 0
    assert page.locator("[data-fact='progress timeout']").text_content() == "45.0 s"


def _workflow(scene: Scene, nodes: list[dict[str, Any]], name: str) -> dict[str, Any]:
    """A workflow of sup.* nodes (the scene's supervisor serves them), once ended."""
    made = expect(scene.producer.post(f"/v1/queues/{scene.queue_id}/workflows", json={
        "nodes": nodes, "name": name}), 201)
    return dict(expect(scene.producer.get(f"/v1/workflows/{made['workflow_id']}",
                                          params={"wait_ms": "30000"}), 200))


def _node(key: str, handler: str, payload: Any, parents: list[Any], **policy: Any
          ) -> dict[str, Any]:
    return {"key": key, "parents": parents, "task": {
        "handler": f"sup.{handler}", "handler_version": "v1", "payload_version": "v1",
        "payload": payload, **policy}}


def test_workflow_pages_show_the_graph_states_causes_and_attempts(page: Any,
                                                                  scene: Scene) -> None:
    failed = _workflow(scene, [
        _node("upper", "upper", {"text": "a"}, []),
        _node("reject", "reject", {"n": 1}, ["upper"], max_attempts=1),
        _node("after", "upper", {"text": "b"}, ["reject"])], "wf failing")
    assert failed["state"] == "FAILED", failed
    _goto(page, scene, f"workflows?queue={scene.queue_id}",
          f"#workflow-table tr[data-workflow-row='{failed['workflow_id']}']")
    row = page.locator(f"tr[data-workflow-row='{failed['workflow_id']}']").text_content()
    assert "wf failing" in row and "FAILED" in row
    page.click(f"tr[data-workflow-row='{failed['workflow_id']}'] a")
    page.wait_for_selector("#workflow-graph tr[data-node='after']")
    _shown(page)
    layers = page.eval_on_selector_all(
        "#workflow-graph [data-layer]", "els => els.map(e => Number(e.dataset.layer))")
    assert layers == [0, 1, 2]
    after = page.locator("tr[data-node='after']")
    assert after.locator("[data-state]").get_attribute("data-state") == "CANCELLED"
    assert after.locator("[data-cause]").text_content() == "PARENT_FAILED (parent reject)"
    assert page.locator("[data-attempts='reject']").text_content() == "1"
    assert page.locator("#workflow-cancel").count() == 0  # ended: nothing to cancel
    # A node's task page links back to its workflow.
    page.click("tr[data-node='reject'] a[data-task]")
    page.wait_for_selector("#task-workflow")
    assert page.locator("#task-workflow").get_attribute("href") == (
        f"#/workflow/{failed['workflow_id']}")
    assert "node reject" in page.locator("[data-fact='workflow']").text_content()
