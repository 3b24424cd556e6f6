"""Prometheus metrics of a real server and a real supervisor with real children, scraped
over HTTP and parsed with prometheus_client's own parser, after tasks that succeed, fail,
and one whose handler outlives its attempt timeout and is killed."""

from __future__ import annotations

import re
from pathlib import Path

from supervisor_support import SupEnv, attempts, submit, wait_task
from support.metrics import Samples, scrape, value
from support.orbit_http import expect
from support.server import free_port
from support.waiting import UNIT, wait_until


def test_server_and_supervisor_metrics_after_tasks_and_a_kill(sup_env: SupEnv,
                                                              tmp_path: Path) -> None:
    port = free_port()
    sup = sup_env.start(workers=2, extra=("--metrics-port", str(port)))
    sup.wait_log("metrics on http://127.0.0.1:")
    q, producer = sup_env.queue_id, sup_env.producer
    ok = [submit(producer, q, "upper", {"text": f"t{i}"}) for i in range(3)]
    failed = submit(producer, q, "reject", {}, max_attempts=1)
    killed = submit(producer, q, "c_spin", {"pid_file": str(tmp_path / "spin.pids")},
                    attempt_timeout_ms=500, lease_ttl_ms=2000, max_attempts=1)
    for task_id in ok:
        assert wait_task(producer, task_id)["state"] == "SUCCEEDED"
    assert wait_task(producer, failed)["state"] == "FAILED"
    assert wait_task(producer, killed)["state"] == "NEEDS_REVIEW"  # uncertain, not idempotent
    # The kill's report reaches the server (deciding the attempt, or as evidence after the
    # reaper's expiry): only then is the kill on record.
    wait_until(lambda: attempts(producer, killed)["attempts"][0]["kill_reason"], timeout=10,
               what="the kill report on the attempt")
    admin = sup_env.orbit.admin_http
    expect(admin.post(f"/v1/tasks/{killed}/review", json={"action": "fail"}), 200)

    server_url = f"{sup_env.orbit.server.url}/metrics"
    text, s = scrape(server_url)
    assert value(s, "orbit_server_info") == 1
    # From the database: tasks by queue and state.
    assert value(s, "orbit_tasks", queue=q, state="SUCCEEDED") == 3
    assert value(s, "orbit_tasks", queue=q, state="FAILED") == 2
    assert value(s, "orbit_tasks_counted_timestamp_seconds") > 0
    # This replica's counts.
    assert value(s, "orbit_tasks_submitted_total", queue=q) == 5
    assert value(s, "orbit_submit_to_start_seconds_count", queue=q, attempt="first") == 5
    assert value(s, "orbit_submit_to_start_seconds_bucket", queue=q, attempt="first",
                 le="+Inf") == 5
    assert value(s, "orbit_attempts_ended_total", queue=q, outcome="SUCCEEDED") == 3
    assert value(s, "orbit_attempts_ended_total", queue=q, outcome="FAILED",
                 code="OBJECT_REJECTED") == 1
    assert value(s, "orbit_attempts_ended_total", queue=q, outcome="UNKNOWN") == 1
    assert value(s, "orbit_attempt_decisions_total", queue=q, decision="NEEDS_REVIEW") == 1
    assert value(s, "orbit_kills_total", queue=q, reason="ATTEMPT_TIMEOUT") == 1
    assert value(s, "orbit_reviews_total", queue=q, action="fail") == 1
    for family in ("orbit_reports_evidence_total", "orbit_lease_expiries_total",
                   "orbit_tasks_timed_out_total", "process_resident_memory_bytes"):
        assert family in s, family
    route = "/v1/queues/{queue_id}/tasks"
    assert value(s, "orbit_http_requests_total", method="POST", route=route, status="201") == 5
    assert value(s, "orbit_http_request_duration_seconds_count", method="GET",
                 route="/v1/tasks/{task_id}") >= 5
    assert value(s, "orbit_store_transaction_seconds_count", lane="worker") > 0
    assert value(s, "orbit_store_transaction_seconds_count", lane="normal") > 0
    assert value(s, "orbit_worker_connections", queue=q) == 1
    assert value(s, "orbit_worker_slots", queue=q) == 2
    assert 0 <= value(s, "orbit_worker_credit", queue=q) <= 4
    # Bounded label values: no task ID and no raw path anywhere in the exposition.
    for task_id in [*ok, failed, killed]:
        assert task_id not in text
    assert not re.search(r'route="/v1/tasks/[0-9a-f]{32}', text)

    # The supervisor's own endpoint.
    sup_url = f"http://127.0.0.1:{port}/metrics"

    def settled() -> Samples | None:
        _, got = scrape(sup_url)
        replaced = value(got, "orbit_supervisor_replacement_latency_seconds_count") == 1
        return got if replaced and value(got, "orbit_supervisor_slots", state="free") == 2 \
            else None

    m = wait_until(settled, timeout=10, what="the killed child's slot refilled")
    assert value(m, "orbit_supervisor_info", queue=q) == 1
    assert value(m, "orbit_supervisor_connected") == 1
    assert value(m, "orbit_supervisor_slots_capacity") == 2
    assert value(m, "orbit_supervisor_slots", state="busy") == 0
    assert value(m, "orbit_supervisor_attempts_started_total") == 5
    assert value(m, "orbit_supervisor_attempts_ended_total", outcome="SUCCEEDED") == 3
    assert value(m, "orbit_supervisor_attempts_ended_total", outcome="FAILED") == 1
    assert value(m, "orbit_supervisor_attempts_ended_total", outcome="UNKNOWN") == 1
    assert value(m, "orbit_supervisor_kills_total", reason="ATTEMPT_TIMEOUT") == 1
    assert value(m, "orbit_supervisor_kill_latency_seconds_count") == 1
    assert 0 < value(m, "orbit_supervisor_kill_latency_seconds_sum") < 5 * UNIT  # generous
    assert 0 < value(m, "orbit_supervisor_replacement_latency_seconds_sum") < 5 * UNIT
    assert value(m, "orbit_supervisor_reports_confirmed_total") \
        + value(m, "orbit_supervisor_reports_evidence_total") >= 5
    assert value(m, "orbit_supervisor_event_loop_lag_seconds_count") > 0
    assert value(m, "orbit_supervisor_children_rss_bytes") > 0
    assert 0 < value(m, "orbit_supervisor_child_rss_max_bytes") \
        <= value(m, "orbit_supervisor_children_rss_bytes")
    assert value(m, "orbit_supervisor_children_spawned_total") == 3  # 2 + the replacement
    # Every frame counted on both sides: what the server had read when scraped first, the
    # supervisor had sent (a heartbeat may have gone out since).
    assert value(m, "orbit_supervisor_frames_total", direction="out") \
        >= value(s, "orbit_frames_total", channel="worker", direction="in") > 0
    # Each of the 5 executions: at least a run message out and its answer in.
    assert value(m, "orbit_supervisor_child_messages_total", direction="out") >= 5
    assert value(m, "orbit_supervisor_child_messages_total", direction="in") >= 5
    assert value(m, "orbit_supervisor_grants_declined_total") == 0
    for family in ("orbit_supervisor_renewals_total", "orbit_supervisor_reconnects_total",
                   "orbit_supervisor_events_dropped_total", "process_resident_memory_bytes"):
        assert family in m, family


def test_metrics_port_in_use_is_a_usage_error(sup_env: SupEnv) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        sup = sup_env.start(extra=("--metrics-port", str(taken.getsockname()[1])))
        assert sup.wait() == 2
    assert "--metrics-port: cannot listen on" in sup.log()

