"""The OpenAPI document and the request validators agree, both ways (security finding 10).

* Every value generated from a request body's schema (``from_schema`` below reads the
  document's keywords; hypothesis-jsonschema does not work with the Hypothesis the suite
  uses) is accepted by the parser the route uses, and every query value generated from a
  parameter's schema by ``parse_filter``.
* A valid body with one field changed to an arbitrary JSON value (or dropped, or an unknown
  field added) is accepted by the parser exactly when the schema admits it
  (jsonschema), so the document is neither looser nor stricter than the server.

Rules no JSON Schema can say are named in the schema's description and kept out of the
generated values: a payload's value rules (64-bit integers, size, depth).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from orbit_server.domain import bodies, flow_bodies, parse_task_spec
from orbit_server.domain.listing import parse_filter
from orbit_server.domain.schedules import parse_schedule
from orbit_server.domain.workflows import WORKFLOW_REQUEST
from orbit_server.openapi import openapi_document
from orbit_wire.errors import OrbitError
from orbit_wire.limits import INT64_MAX, INT64_MIN

DOC = openapi_document()
SCHEMAS = DOC["components"]["schemas"]


def _batch(value: object) -> None:
    for spec in bodies.BATCH_SHAPE.parse(value, "request body")["tasks"]:
        parse_task_spec(spec)


def _workflow(value: object) -> None:
    """The body's shape and each node's TaskSpec; the graph's rules (parents that exist, no
    cycle) are the service's, as a queue that exists is (tests/unit/server/
    test_workflow_rules.py)."""
    WORKFLOW_REQUEST.parse(value, "request body")
    assert isinstance(value, dict)
    for node in value["nodes"]:
        parse_task_spec(node["task"])


PARSERS: dict[str, Callable[[object], object]] = {
    "TaskSpec": parse_task_spec,
    "ScheduleRequest": parse_schedule,
    "Batch": _batch,
    "QueueRequest": lambda v: bodies.QUEUE_REQUEST.parse(v, "request body"),
    "CredentialRequest": bodies.parse_credential_request,
    "RotateRequest": lambda v: bodies.ROTATE_REQUEST.parse(v, "request body"),
    "CancelRequest": lambda v: bodies.CANCEL_REQUEST.parse(v, "request body"),
    "ReviewRequest": bodies.parse_review_request,
    "RetryRequest": lambda v: bodies.RETRY_REQUEST.parse(v, "request body"),
    "BulkRetryRequest": lambda v: bodies.BULK_RETRY_REQUEST.parse(v, "request body"),
    "PauseRequest": flow_bodies.parse_pause_request,
    "ResumeRequest": flow_bodies.parse_resume_request,
    "BulkCancelRequest": lambda v: flow_bodies.BULK_CANCEL_REQUEST.parse(v, "request body"),
    "BulkReviewRequest": flow_bodies.parse_bulk_review_request,
    "LimitRequest": bodies.parse_limit_request,
    "WorkflowRequest": _workflow,
    "FairRequest": lambda v: flow_bodies.FAIR_REQUEST.parse(v, "request body"),
}


def _resolved(name: str) -> dict[str, Any]:
    """The named schema with the document's components beside it, so its $refs resolve."""
    return {**SCHEMAS[name], "components": DOC["components"]}


_ANY = st.recursive(st.booleans() | st.integers() | st.floats(allow_nan=False,
                                                              allow_infinity=False)
                    | st.text(max_size=10),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=6), inner | st.none(), max_size=3),
                    max_leaves=8)


def from_schema(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values of a schema written with the keywords the document uses; cross-field rules
    (``if``/``then``, ``not``) are met by filtering with a real validator."""
    validator = jsonschema.Draft202012Validator(schema)
    return _strategy(schema, schema).filter(validator.is_valid)


def _strategy(schema: dict[str, Any], root: dict[str, Any]) -> st.SearchStrategy[Any]:
    if "$ref" in schema:
        target: Any = root
        for part in schema["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        return _strategy(target, root)
    if "anyOf" in schema:  # a nullable field: each alternative with the field's keywords
        rest = {k: v for k, v in schema.items() if k != "anyOf"}
        return st.one_of([_strategy({**rest, **option}, root) for option in schema["anyOf"]])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if schema.get("not") == {"type": "null"} and "type" not in schema:
        return _ANY
    kinds = schema.get("type")
    if kinds is None:
        return _ANY | st.none()
    if isinstance(kinds, list):
        return st.one_of([_strategy({**schema, "type": kind}, root) for kind in kinds])
    if kinds == "null":
        return st.none()
    if kinds == "boolean":
        return st.booleans()
    if kinds == "integer":
        return st.integers(schema.get("minimum"), schema.get("maximum"))
    if kinds == "number":
        return st.floats(schema.get("minimum"), schema.get("maximum"), allow_nan=False)
    if kinds == "string":
        lo, hi = schema.get("minLength", 0), schema.get("maxLength", 64)
        if "pattern" in schema:
            return st.from_regex(schema["pattern"]).filter(lambda v: lo <= len(v) <= hi)
        return st.text(min_size=lo, max_size=min(hi, 64))
    if kinds == "array":
        return st.lists(_strategy(schema["items"], root), min_size=schema.get("minItems", 0),
                        max_size=min(schema.get("maxItems", 3), 3))
    assert kinds == "object", schema
    if "properties" not in schema:  # a map (a task's ``requires``): keys and values by rule
        return st.dictionaries(_strategy({"type": "string", **schema["propertyNames"]}, root),
                               _strategy(schema["additionalProperties"], root),
                               max_size=min(schema.get("maxProperties", 3), 3))
    props, required = schema["properties"], set(schema.get("required", ()))
    return st.fixed_dictionaries(
        {key: _strategy(props[key], root) for key in sorted(required)},
        optional={key: _strategy(value, root) for key, value in props.items()
                  if key not in required})


def _accepts(name: str, value: object) -> bool:
    try:
        PARSERS[name](value)
    except OrbitError:
        return False
    return True


def _value_rules_hold(value: object) -> bool:
    """No integer outside signed 64-bit (a payload's value rule), no string ending in a
    newline (Python's ``$`` matches before it, ECMA's and the parsers' do not)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, bool):
            continue
        if isinstance(item, int) and not INT64_MIN <= item <= INT64_MAX:
            return False
        if isinstance(item, str) and item.endswith("\n"):
            return False
        if isinstance(item, dict):
            stack.extend(item.values())
            stack.extend(item.keys())
        elif isinstance(item, list):
            stack.extend(item)
    return True


def test_every_request_body_has_a_parser() -> None:
    bodies_in_doc = {op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
                     .rsplit("/", 1)[1]
                     for ops in DOC["paths"].values() for op in ops.values()
                     if "requestBody" in op}
    assert bodies_in_doc == set(PARSERS)
    for name in PARSERS:
        assert SCHEMAS[name]["additionalProperties"] is False, name


def _settings(name: str) -> settings:
    # A batch holds whole specs: fewer examples keep it to seconds.
    return settings(max_examples=10 if name == "Batch" else 40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                           HealthCheck.data_too_large])


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_values_of_the_schema_are_accepted(name: str) -> None:
    @_settings(name)
    @given(from_schema(_resolved(name)))
    def check(value: object) -> None:
        assume(_value_rules_hold(value))
        PARSERS[name](value)  # raises on a refusal

    check()


_JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**40, 2**40)
                     | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=6)
_EDGE = st.sampled_from(["", " ", "a", "A-1", "x" * 129, "k" * 256, "IDEMPOTENT", "retry",
                         "succeed", "producer", "worker", "admin", "skip", "*/5 * * * *",
                         "0" * 32, -1, 0, 99, 100, 101, 2**53, 2**53 + 1, 0.5, 10.5, True,
                         None, [], ["0" * 32], {}, {"initial_ms": 5}])


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_one_changed_field_is_refused_exactly_when_the_schema_refuses_it(name: str) -> None:
    validator = jsonschema.Draft202012Validator(_resolved(name))
    props = [*sorted(SCHEMAS[name]["properties"]), "unknown_field"]

    @_settings(name)
    @given(from_schema(_resolved(name)), st.sampled_from(props),
           st.one_of(_EDGE, _JSON, st.just(KeyError)))
    def check(valid: dict[str, Any], key: str, new: object) -> None:
        assume(_value_rules_hold(valid))
        changed = dict(valid)
        if new is KeyError:
            changed.pop(key, None)
        else:
            changed[key] = new
        assume(_value_rules_hold(changed))
        assert _accepts(name, changed) == validator.is_valid(changed), changed

    check()


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_query_values_of_the_list_schema_are_accepted(data: st.DataObject) -> None:
    params = {p["name"]: p["schema"] for p in DOC["paths"]["/v1/queues/{queue_id}/tasks"]["get"]
              ["parameters"] if p["in"] == "query" and p["name"] != "cursor"}
    chosen = data.draw(st.sets(st.sampled_from(sorted(params)), max_size=4))
    query: dict[str, list[str]] = {}
    for key in chosen:
        schema = params[key]
        if "pattern" in schema:
            value = data.draw(st.from_regex(schema["pattern"]))
        elif schema["type"] == "integer":
            value = str(data.draw(st.integers(schema["minimum"], schema["maximum"])))
        elif "enum" in schema:
            value = data.draw(st.sampled_from(schema["enum"]))
        else:
            value = data.draw(st.text(max_size=schema["maxLength"]))
        query[key] = [value]
    parse_filter(query)


@pytest.mark.parametrize("value", ["pending", "PENDING, running", ",", "", "FAILED,,x"])
def test_state_pattern_matches_the_parser(value: str) -> None:
    params = {p["name"]: p["schema"] for p in DOC["paths"]["/v1/queues/{queue_id}/tasks"]["get"]
              ["parameters"]}
    matches = re.search(params["state"]["pattern"], value) is not None
    try:
        parse_filter({"state": [value]})
        accepted = True
    except OrbitError:
        accepted = False
    assert matches == accepted, value
