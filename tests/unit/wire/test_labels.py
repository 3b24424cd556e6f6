"""A worker's labels and what a task requires of them (orbit_wire/labels.py): the rule for
names and values, the canonical text and its digest, the subset test; the TaskType's
``requires`` and hello's ``labels`` checked by the same rule."""

from __future__ import annotations

from typing import Any

import pytest

from orbit_wire import Capability, TaskType
from orbit_wire.errors import ErrorCode, OrbitError, ProtocolError
from orbit_wire.frames import Hello, decode_client_frame, encode
from orbit_wire.labels import (
    labels_match,
    parse_label,
    parse_labels,
    requires_from_text,
    requires_key,
    requires_text,
)
from orbit_wire.limits import MAX_LABELS

CAP = Capability("train", "v1", "v1")


def test_a_label_is_name_equals_value() -> None:
    assert parse_label("gpu=a100") == ("gpu", "a100")
    assert parse_label("zone=eu-west/1:a") == ("zone", "eu-west/1:a")
    assert parse_labels(["gpu=a100", "mem=64G"]) == {"gpu": "a100", "mem": "64G"}


@pytest.mark.parametrize(("text", "says"), [
    ("gpu", "must be NAME=VALUE"),
    ("=a100", "its name must be 1-64 characters"),
    ("gpu=", "its value must be 1-64 characters"),
    ("gpu=a 100", "its value must be"),
    ("g,pu=a100", "its name must be"),
    ("gpu=a=b", "its value must be"),
    ("-gpu=a100", "its name must be"),
    ("gpu=" + "x" * 65, "its value must be"),
])
def test_a_bad_label_is_refused_naming_it(text: str, says: str) -> None:
    with pytest.raises(OrbitError) as refused:
        parse_label(text)
    assert refused.value.code is ErrorCode.BAD_REQUEST
    assert says in refused.value.message and repr(text) in refused.value.message


def test_labels_given_twice_or_too_many_are_refused() -> None:
    with pytest.raises(OrbitError, match="'gpu' is given twice"):
        parse_labels(["gpu=a100", "gpu=h100"])
    with pytest.raises(OrbitError, match=f"at most {MAX_LABELS} labels"):
        parse_labels([f"k{i}=v" for i in range(MAX_LABELS + 1)])


def test_the_canonical_text_sorts_the_names_and_round_trips() -> None:
    assert requires_text(None) is None and requires_text({}) is None
    text = requires_text({"mem": "64G", "gpu": "a100"})
    assert text == "gpu=a100,mem=64G"
    assert requires_from_text(text) == {"gpu": "a100", "mem": "64G"}
    assert requires_from_text(None) == {}
    key = requires_key(text)
    assert key is not None and len(key) == 32
    assert key == requires_key(requires_text({"gpu": "a100", "mem": "64G"}))
    assert key != requires_key("gpu=a100")
    assert requires_key(None) is None


def test_a_worker_matches_when_its_labels_include_every_pair() -> None:
    labels = {"gpu": "a100", "mem": "64G"}
    assert labels_match(labels, {})
    assert labels_match(labels, {"gpu": "a100"})
    assert labels_match(labels, {"gpu": "a100", "mem": "64G"})
    assert not labels_match(labels, {"gpu": "h100"})
    assert not labels_match(labels, {"gpu": "a100", "disk": "ssd"})
    assert not labels_match({}, {"gpu": "a100"})


def test_a_task_type_declares_requires_and_stays_hashable() -> None:
    gpu = TaskType("train", "v1", "v1", requires={"gpu": "a100"})
    assert gpu.requires == (("gpu", "a100"),)
    assert gpu.policy.declared() == {"requires": {"gpu": "a100"}}
    assert hash(gpu) == hash(TaskType("train", "v1", "v1", requires={"gpu": "a100"}))
    assert gpu.spec({})["requires"] == {"gpu": "a100"}
    assert gpu.spec({}, requires={"mem": "64G"})["requires"] == {"mem": "64G"}
    with pytest.raises(OrbitError) as refused:
        TaskType("train", "v1", "v1", requires={"gpu": "a 100"})
    assert refused.value.code is ErrorCode.BAD_REQUEST and "requires" in refused.value.message


def _hello(**extra: Any) -> Hello:
    return Hello(credential_id="a" * 32, credential_secret="s", instance_id="b" * 32,
                 instance_secret="t", queue_id="c" * 32, capabilities=(CAP,), capacity=2,
                 **extra)


def test_hello_carries_labels_and_refuses_bad_ones() -> None:
    assert b"labels" not in encode(_hello())  # a worker without labels sends what it did
    back = decode_client_frame(encode(_hello(labels={"gpu": "a100"})))
    assert isinstance(back, Hello) and back.labels == {"gpu": "a100"}
    for bad in ({"gpu": "a 100"}, {"": "x"}, {f"k{i}": "v" for i in range(MAX_LABELS + 1)}):
        with pytest.raises(ProtocolError) as refused:
            decode_client_frame(encode(_hello(labels=bad)))
        assert refused.value.code is ErrorCode.BAD_FRAME
        assert "labels" in refused.value.message
