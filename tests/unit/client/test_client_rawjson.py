"""member_text slices a member's exact text out of a JSON object without re-encoding it."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from orbit_client.rawjson import member_text

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


def test_keeps_the_number_text_a_handler_produced() -> None:
    body = b'{"id": "t1", "result": {"price": 1.10, "big": 1e2, "n": [1.0, -0.0]}, "epoch": 3}'
    assert member_text(body, "result") == b'{"price": 1.10, "big": 1e2, "n": [1.0, -0.0]}'
    assert member_text(body, "epoch") == b"3"
    assert member_text(body, "id") == b'"t1"'


def test_strings_with_braces_quotes_and_escapes_do_not_confuse_it() -> None:
    body = b'{"a": "}{\\"\\\\", "result": ["]", "\\"}", {"x": "{"}], "z": null}'
    assert member_text(body, "result") == b'["]", "\\"}", {"x": "{"}]'
    assert member_text(body, "z") == b"null"


def test_absent_key_non_object_and_garbage_give_none() -> None:
    assert member_text(b'{"a": 1}', "result") is None
    assert member_text(b"{}", "result") is None
    assert member_text(b"[1, 2]", "result") is None
    assert member_text(b'{"result": ', "result") is None
    assert member_text(b'{"result" 1}', "result") is None
    assert member_text(b"", "result") is None


def test_nested_key_of_the_same_name_is_not_taken_for_the_top_level_one() -> None:
    body = b'{"payload": {"result": 7}, "result": 8}'
    assert member_text(body, "result") == b"8"
    assert member_text(b'{"payload": {"result": 7}}', "result") is None


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=6), _values, max_size=6), _values, st.booleans())
def test_the_slice_parses_to_the_member_value(
    obj: dict[str, object], value: object, pretty: bool
) -> None:
    obj = {k: v for k, v in obj.items() if k != "result"}
    obj["result"] = value
    body = orjson.dumps(obj, option=orjson.OPT_INDENT_2 if pretty else 0)
    raw = member_text(body, "result")
    assert raw is not None
    assert orjson.loads(raw) == orjson.loads(orjson.dumps(value))
