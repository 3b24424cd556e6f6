"""Every route's query parameters agree with the OpenAPI document, both ways: a route
declares exactly the parameters the document lists for it, and its parser accepts a value
exactly when the parameter's schema does (values generated from the schema, and values
near its edges: empty, signs, blanks, non-ASCII digits, one past each bound).

The routes come from a real ``OrbitServer``'s app (built, never served)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.routing import Route

from orbit_server.app import OrbitServer
from orbit_server.config import ServerConfig
from orbit_server.domain.query import Param, parse_query
from orbit_server.openapi import openapi_document
from orbit_wire.errors import OrbitError

DOC = openapi_document()


@pytest.fixture(scope="module")
def declared(tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[dict[tuple[str, str], tuple[Param, ...]]]:
    """(path, method) -> the query parameters each API route of the app declares."""
    db = Path(tmp_path_factory.mktemp("routes")) / "orbit.db"
    server = OrbitServer(ServerConfig(db_url=f"sqlite:///{db}"))
    try:
        yield {(route.path, method.lower()): route.endpoint.__dict__["query"]
               for route in server.app.routes
               if isinstance(route, Route) and "query" in route.endpoint.__dict__
               for method in route.methods or () if method != "HEAD"}
    finally:
        if server.metrics is not None:
            server.metrics.close()
        server.engine.dispose()


def _documented(path: str, method: str) -> dict[str, dict[str, Any]]:
    return {p["name"]: p["schema"] for p in DOC["paths"][path][method].get("parameters", [])
            if p["in"] == "query"}


def _schema_accepts(schema: dict[str, Any], raw: str) -> bool:
    """Whether a query value is valid for its schema: an integer parameter's value must be
    written as an integer."""
    value: object = raw
    if schema.get("type") == "integer":
        if not re.fullmatch(r"-?[0-9]+", raw):
            return False
        value = int(raw)
    return bool(jsonschema.Draft202012Validator(schema).is_valid(value))


def _parser_accepts(params: Sequence[Param], name: str, raw: str) -> bool:
    try:
        parse_query({name: [raw]}, params)
    except OrbitError:
        return False
    return True


def _edges(schema: dict[str, Any]) -> list[str]:
    values = ["", " ", "0", "-1", "+1", "1.5", "1e3", "x", "\u0661", "\u00b2", "\uff11",
              "a" * 32, "f" * 32, "F" * 32, "f" * 31, "newest", "oldest", "Newest",
              "x" * 256, "x" * 257, " 7", "7 "]
    for bound in ("minimum", "maximum"):
        if bound in schema:
            values += [str(schema[bound] - 1), str(schema[bound]), str(schema[bound] + 1)]
    if "maxLength" in schema:
        values += ["y" * schema["maxLength"], "y" * (schema["maxLength"] + 1)]
    return values


def test_every_route_declares_what_the_document_lists(
        declared: dict[tuple[str, str], tuple[Param, ...]]) -> None:
    documented = {(path, method) for path, item in DOC["paths"].items() for method in item}
    # Every API route of the app (the document lists each, test_openapi_routes checks it).
    assert set(declared) <= documented
    for (path, method), params in declared.items():
        assert sorted(p.name for p in params) == sorted(_documented(path, method)), path


def test_an_empty_integer_is_refused_not_taken_as_absent(
        declared: dict[tuple[str, str], tuple[Param, ...]]) -> None:
    params = declared[("/v1/queues/{queue_id}/throughput", "get")]
    for name in ("windows", "window_ms"):
        assert not _parser_accepts(params, name, "")


def test_edge_values_are_refused_exactly_when_the_schema_refuses_them(
        declared: dict[tuple[str, str], tuple[Param, ...]]) -> None:
    checked = 0
    for (path, method), params in declared.items():
        for name, schema in _documented(path, method).items():
            if name == "cursor":  # opaque: what it names is checked past its schema
                continue
            for raw in _edges(schema):
                assert _parser_accepts(params, name, raw) == _schema_accepts(schema, raw), (
                    path, name, raw)
                checked += 1
    assert checked > 300


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_values_generated_from_each_schema_are_accepted(
        declared: dict[tuple[str, str], tuple[Param, ...]], data: st.DataObject) -> None:
    path, method = data.draw(st.sampled_from(sorted(declared)))
    documented = _documented(path, method)
    if not documented:
        assert parse_query({}, declared[(path, method)]) == {}
        return
    name = data.draw(st.sampled_from(sorted(documented)))
    schema = documented[name]
    if "pattern" in schema:
        raw = data.draw(st.from_regex(schema["pattern"], fullmatch=True))
    elif schema.get("type") == "integer":
        raw = str(data.draw(st.integers(schema["minimum"], schema.get("maximum"))))
    elif "enum" in schema:
        raw = data.draw(st.sampled_from(schema["enum"]))
    else:
        raw = data.draw(st.text(max_size=schema["maxLength"]))
    if name == "cursor":
        raw = ""  # only a cursor a list returned is valid: empty means the first page
    assert _parser_accepts(declared[(path, method)], name, raw), (path, name, raw)
