"""The pure call layer: requests built from arguments, answers decoded into values or errors."""

from __future__ import annotations

import math
import os
import stat
from pathlib import Path

import orjson
import pytest

from orbit_client import Credentials, CredentialsFileError, OrbitApiError, OrbitClient, calls
from orbit_host.credentials import load_credentials, write_credentials
from orbit_wire.errors import ErrorCode

QID = "0123456789abcdef0123456789abcdef"
TID = "fedcba9876543210fedcba9876543210"
SPEC = {"handler": "h", "handler_version": "v1", "payload_version": "v1", "payload": {"n": 1}}


def test_submit_builds_the_documented_request() -> None:
    call = calls.submit(QID, SPEC)
    assert (call.method, call.path) == ("POST", f"/v1/queues/{QID}/tasks")
    assert orjson.loads(call.body or b"") == SPEC
    assert call.expected == (200, 201) and call.task_answer


def test_payload_fragment_is_sent_as_exact_text() -> None:
    call = calls.submit(QID, {**SPEC, "payload": orjson.Fragment(b'{"x": 1.10}')})
    assert b'"payload":{"x": 1.10}' in (call.body or b"")


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        ({"x": math.nan}, ErrorCode.NUMBER_OUT_OF_RANGE),
        ({"x": 2**64}, ErrorCode.NUMBER_OUT_OF_RANGE),
        (None, ErrorCode.BAD_REQUEST),
        ({"x": object()}, ErrorCode.INVALID_JSON),
    ],
)
def test_payloads_breaking_value_rules_are_refused_locally(payload: object, code: str) -> None:
    with pytest.raises(OrbitApiError) as info:
        calls.submit(QID, {**SPEC, "payload": payload})
    assert info.value.code == code and info.value.status is None


@pytest.mark.parametrize("bad", ["", "../admin", QID.upper(), QID + "0", "x" * 32])
def test_ids_are_checked_so_nothing_odd_reaches_the_path(bad: str) -> None:
    for build in (calls.get_task, calls.attempts, calls.audit, calls.cancel):
        with pytest.raises(OrbitApiError) as info:
            build(bad)
        assert info.value.code == ErrorCode.BAD_REQUEST
    with pytest.raises(OrbitApiError):
        calls.submit(bad, SPEC)


def test_wait_is_bounded_and_extends_the_read_timeout() -> None:
    call = calls.get_task(TID, wait_ms=1500)
    assert call.params == {"wait_ms": "1500"} and call.wait_ms == 1500
    with pytest.raises(OrbitApiError):
        calls.get_task(TID, wait_ms=60_001)
    with pytest.raises(OrbitApiError):
        calls.get_task(TID, wait_ms=-1)


def test_batch_is_bounded_and_names_the_bad_index() -> None:
    with pytest.raises(OrbitApiError):
        calls.submit_batch(QID, [])
    with pytest.raises(OrbitApiError) as info:
        calls.submit_batch(QID, [SPEC, {**SPEC, "payload": math.inf}])
    assert info.value.message.startswith("tasks[1]:")


def test_review_checks_action_and_result() -> None:
    body = orjson.loads(calls.review(TID, "succeed", {"ok": True}, "checked").body or b"")
    assert body == {"action": "succeed", "result": {"ok": True}, "reason": "checked"}
    with pytest.raises(OrbitApiError):
        calls.review(TID, "approve")
    with pytest.raises(OrbitApiError):
        calls.review(TID, "fail", {"ok": True})


def test_create_credential_checks_role() -> None:
    assert orjson.loads(calls.create_credential("worker", [QID]).body or b"") == {
        "role": "worker", "queues": [QID]
    }
    with pytest.raises(OrbitApiError):
        calls.create_credential("root", [QID])


def test_decode_attaches_exact_result_text_to_task_answers() -> None:
    body = b'{"id": "t", "state": "SUCCEEDED", "result": {"v": 1.10}}'
    task = calls.decode(calls.get_task(TID), 200, body)
    assert task["result"] == {"v": 1.1}
    assert task["result_json"] == '{"v": 1.10}'
    empty = calls.decode(calls.get_task(TID), 200, b'{"id": "t", "result": null}')
    assert empty["result_json"] is None
    stats = calls.decode(calls.queue_stats(QID), 200, b'{"result": 1}')
    assert "result_json" not in stats


def test_decode_maps_error_bodies_to_codes_status_and_retryable() -> None:
    body = b'{"error": {"code": "PERMISSION_DENIED", "message": "not yours", "retryable": false}}'
    with pytest.raises(OrbitApiError) as info:
        calls.decode(calls.get_task(TID), 403, body)
    err = info.value
    assert (err.code, err.status, err.retryable, err.message) == (
        ErrorCode.PERMISSION_DENIED, 403, False, "not yours"
    )
    with pytest.raises(OrbitApiError) as info:
        calls.decode(calls.get_task(TID), 503, b"<html>gateway</html>")
    assert (info.value.code, info.value.retryable) == (ErrorCode.UNAVAILABLE, True)
    with pytest.raises(OrbitApiError) as info:
        calls.decode(calls.get_task(TID), 409, b'{"error": {"code": "NEW_CODE", "message": "m"}}')
    assert info.value.code == ErrorCode.CONFLICT and "NEW_CODE" in info.value.message
    with pytest.raises(OrbitApiError) as info:
        calls.decode(calls.get_task(TID), 200, b"[1]")
    assert info.value.code == ErrorCode.INTERNAL
    with pytest.raises(OrbitApiError) as info:  # 200 where 201 is the contract
        calls.decode(calls.create_queue(), 200, b"{}")


def _creds() -> Credentials:
    return Credentials("http://127.0.0.1:1", QID, "s3cr3t-value", "producer", (QID,))


def test_secret_stays_out_of_reprs() -> None:
    creds = _creds()
    client = OrbitClient(credentials=creds)
    try:
        for text in (repr(creds), repr(client), str(client)):
            assert "s3cr3t-value" not in text
        assert QID in repr(client)
    finally:
        client.close()


def test_credentials_file_is_0600_even_over_a_looser_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "creds.json"
    path.parent.mkdir()
    path.write_text("old")
    os.chmod(path, 0o644)
    write_credentials(path, _creds())
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_credentials(path) == _creds()
    assert [p.name for p in path.parent.iterdir()] == ["creds.json"]  # no temp file left


def test_unwritable_credentials_file_is_a_credentials_error(tmp_path: Path) -> None:
    with pytest.raises(CredentialsFileError):
        write_credentials(tmp_path, _creds())  # a directory is in the way
    assert list(tmp_path.iterdir()) == []
