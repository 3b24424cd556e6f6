"""What both channel drivers share (orbit_client/channel_link.py): the channel's URL beside
the HTTP API, the operation keys of submits, and what a failed opening means."""

from __future__ import annotations

import ssl

import pytest
from websockets.datastructures import Headers
from websockets.exceptions import InvalidHeader, InvalidMessage, InvalidStatus
from websockets.http11 import Response

from orbit_client.channel_link import (
    ChannelRefused,
    connect_options,
    keyed_specs,
    new_operation_key,
    opening_failure,
    producer_url,
)
from orbit_client.errors import CertificateError, ServerUnreachable
from orbit_wire.errors import ErrorCode

URL = "ws://127.0.0.1:1/v1/producer"


@pytest.mark.parametrize(("base", "url"), [
    ("http://127.0.0.1:8080", "ws://127.0.0.1:8080/v1/producer"),
    ("https://orbit.example", "wss://orbit.example/v1/producer"),
    ("https://orbit.example/api/", "wss://orbit.example/api/v1/producer"),
])
def test_the_channel_sits_beside_the_http_api(base: str, url: str) -> None:
    assert producer_url(base) == url


def test_every_spec_gets_an_operation_key_unless_it_has_one() -> None:
    mine = {"payload": 1, "operation_key": "order-42"}
    keyed = keyed_specs([mine, {"payload": 2}, {"payload": 3}])
    assert keyed[0] is mine
    made = [spec["operation_key"] for spec in keyed[1:]]
    assert len(set(made)) == 2 and all(k.startswith("orbit-") for k in made)
    key = new_operation_key()
    assert 1 <= len(key) <= 255 and all(0x21 <= ord(ch) <= 0x7E for ch in key)


def test_the_upgrade_carries_the_bearer_and_the_tls_trust() -> None:
    context = ssl.create_default_context()
    options = connect_options({"Authorization": "Bearer s3cret", "Accept": "x"}, context, 5.0)
    assert options["additional_headers"] == {"Authorization": "Bearer s3cret"}
    assert options["ssl"] is context and options["open_timeout"] == 5.0
    assert "ssl" not in connect_options({"Authorization": "Bearer s"}, None, 5.0)


def _status(status: int) -> InvalidStatus:
    return InvalidStatus(Response(status, "x", Headers()))


@pytest.mark.parametrize(("status", "for_good"), [
    (403, True), (404, True), (401, True), (426, True), (429, False), (503, False)])
def test_a_status_answering_the_upgrade_refuses_the_channel(status: int, for_good: bool) -> None:
    refused = opening_failure(URL, _status(status))
    assert isinstance(refused, ChannelRefused)
    assert (refused.status, refused.for_good) == (status, for_good)


def test_no_answer_is_unreachable_and_a_refused_certificate_is_final() -> None:
    for exc in (ConnectionRefusedError(111, "refused"), TimeoutError(),
                InvalidMessage("did not receive a valid HTTP response")):
        failure = opening_failure(URL, exc)
        assert isinstance(failure, ServerUnreachable) and failure.code is ErrorCode.UNAVAILABLE
    cert = ssl.SSLCertVerificationError(1, "certificate verify failed")
    cert.verify_message, cert.reason = "self-signed certificate", "CERTIFICATE_VERIFY_FAILED"
    refused = opening_failure(URL, cert)
    assert isinstance(refused, CertificateError) and "self-signed" in refused.message
    # An answer that is no WebSocket upgrade at all: the channel is not there.
    odd = opening_failure(URL, InvalidHeader("Upgrade", "h2c"))
    assert isinstance(odd, ChannelRefused) and odd.for_good
