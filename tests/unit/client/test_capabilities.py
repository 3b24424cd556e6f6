"""A handler's versions found from its queue's registrations (orbit_client/capabilities.py):
one pair is chosen, several are listed, none is NOT_FOUND."""

from __future__ import annotations

from typing import Any

import pytest

from orbit_client.capabilities import choose_versions
from orbit_client.errors import OrbitApiError
from orbit_wire.errors import ErrorCode


def _registered(*pairs: tuple[str, str, str]) -> dict[str, Any]:
    return {"queue_id": "q" * 32, "capabilities": [
        {"capability": {"handler": h, "handler_version": v, "payload_version": p},
         "policy": {}} for h, v, p in pairs]}


REGISTERED = _registered(("a", "v1", "p1"), ("b", "v1", "p1"), ("b", "v2", "p1"),
                         ("b", "v2", "p2"))


def test_one_pair_is_chosen() -> None:
    assert choose_versions(REGISTERED, "a", None, None) == ("v1", "p1")
    assert choose_versions(REGISTERED, "b", "v1", None) == ("v1", "p1")
    assert choose_versions(REGISTERED, "b", None, "p2") == ("v2", "p2")


def test_several_pairs_are_listed() -> None:
    with pytest.raises(OrbitApiError) as several:
        choose_versions(REGISTERED, "b", "v2", None)
    assert several.value.code is ErrorCode.BAD_REQUEST and several.value.status is None
    assert several.value.message == (
        f"handler 'b' has 2 registered versions in queue {'q' * 32}; choose one: "
        "--handler-version v2 --payload-version p1, --handler-version v2 --payload-version p2")


def test_none_is_not_found() -> None:
    with pytest.raises(OrbitApiError) as none:
        choose_versions(REGISTERED, "c", None, None)
    assert none.value.code is ErrorCode.NOT_FOUND
    assert "no worker has registered handler 'c' in queue" in none.value.message
    with pytest.raises(OrbitApiError) as wrong:
        choose_versions(REGISTERED, "a", "v9", None)
    assert "handler 'a' with handler_version v9" in wrong.value.message
