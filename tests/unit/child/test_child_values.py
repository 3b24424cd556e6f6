"""Handler-side pieces without processes: spec validation and result encoding."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from orbit_child import Execution, Handler, RawJSON, WorkerFailure
from orbit_child.registry import parse_spec, validate_handlers
from orbit_child.results import encode_json_value
from orbit_wire.errors import ErrorCode, HandlerSpecError, ValueRejected
from orbit_wire.model import Capability


def fn(execution: Execution) -> Any:
    return 1


@pytest.mark.parametrize("spec", ["x", ":x", "x:", "a-b:c", "a:b:c", "a..b:c"])
def test_malformed_specs(spec: str) -> None:
    with pytest.raises(HandlerSpecError):
        parse_spec(spec)


def test_dotted_specs_parse() -> None:
    assert parse_spec("app.tasks:registry.handlers") == ("app.tasks", "registry.handlers")


def test_validation_accepts_lists_tuples_and_registries() -> None:
    handlers = [Handler("a", "1", "1", fn), Handler("a", "1", "2", fn)]

    class Registry:
        def __init__(self) -> None:
            self.handlers = tuple(handlers)

    assert validate_handlers(handlers) == tuple(handlers)
    assert validate_handlers(Registry()) == tuple(handlers)
    assert handlers[1].capability == Capability("a", "1", "2")


def test_a_registry_whose_handlers_is_a_method_is_rejected() -> None:
    class Registry:
        def handlers(self) -> list[Handler]:
            return []

    with pytest.raises(HandlerSpecError, match="expected a list of Handler"):
        validate_handlers(Registry())


@pytest.mark.parametrize(("value", "code"), [
    ({"x": float("nan")}, ErrorCode.NUMBER_OUT_OF_RANGE),
    ([Decimal("Infinity")], ErrorCode.NUMBER_OUT_OF_RANGE),
    (2**64, ErrorCode.NUMBER_OUT_OF_RANGE),
    (2**63, ErrorCode.NUMBER_OUT_OF_RANGE),
    ({"n": -(2**63) - 1}, ErrorCode.NUMBER_OUT_OF_RANGE),
    (RawJSON("[1e999]"), ErrorCode.NUMBER_OUT_OF_RANGE),
    (RawJSON('{"a":'), ErrorCode.INVALID_JSON),
    ({"r": RawJSON("[12345678901234567890]")}, ErrorCode.NUMBER_OUT_OF_RANGE),
    ([Decimal("1e999")], ErrorCode.NUMBER_OUT_OF_RANGE),
    (RawJSON("[" * 33 + "]" * 33), ErrorCode.NESTING_TOO_DEEP),
    ({1, 2}, ErrorCode.INVALID_JSON),
    ("x" * (256 * 1024 + 1), ErrorCode.PAYLOAD_TOO_LARGE),
])
def test_values_the_child_cannot_carry(value: Any, code: ErrorCode) -> None:
    with pytest.raises(ValueRejected) as info:
        encode_json_value(value)
    assert info.value.code is code


def test_a_cyclic_value_is_rejected_without_hanging() -> None:
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    with pytest.raises(ValueRejected) as info:
        encode_json_value(cyclic)
    assert info.value.code is ErrorCode.NESTING_TOO_DEEP


def test_exact_texts_survive_encoding() -> None:
    assert encode_json_value(RawJSON("1.10")) == "1.10"
    value = {"d": Decimal("1.10"), "r": RawJSON("[1.0]")}
    assert encode_json_value(value) == '{"d":1.10,"r":[1.0]}'
    assert encode_json_value(2**63 - 1) == "9223372036854775807"
    assert encode_json_value({"n": None}) == '{"n":null}'
    # A handler that returns None succeeded: its result is JSON null.
    assert encode_json_value(None) == "null"


def test_worker_failure_defaults_and_code_rule() -> None:
    failure = WorkerFailure("OBJECT_REJECTED")
    assert (failure.details, failure.retryable, failure.code_is_valid) == ({}, False, True)
    assert not WorkerFailure("bad code").code_is_valid
    assert not WorkerFailure("A" * 65).code_is_valid


def test_execution_can_be_built_for_handler_unit_tests() -> None:
    execution = Execution("t" * 32, "a" * 32, 1, 1, Capability("a", "1", "1"), {"k": 1},
                          0, "IDEMPOTENT")
    assert not execution.cancelled()
