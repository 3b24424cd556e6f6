"""A task answer carries its result's text exactly as the server sent it (``result_json``):
the number text a handler produced survives, whatever else the answer holds."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from orbit_client import calls

TID = "0" * 32


def _result_json(body: bytes) -> object:
    return calls.decode(calls.get_task(TID), 200, body)["result_json"]


def test_keeps_the_number_text_a_handler_produced() -> None:
    body = b'{"id": "t1", "result": {"price": 1.10, "big": 1e2, "n": [1.0, -0.0]}, "epoch": 3}'
    assert _result_json(body) == '{"price": 1.10, "big": 1e2, "n": [1.0, -0.0]}'
    assert _result_json(b'{"result": 12345678901234567890123}') == "12345678901234567890123"
    assert _result_json(b'{"result":\n  "\\u00e9 \\"x\\""\n}') == '"\\u00e9 \\"x\\""'


def test_strings_with_braces_quotes_and_escapes_do_not_confuse_it() -> None:
    body = b'{"a": "}{\\"\\\\", "result": ["]", "\\"}", {"x": "{"}], "z": null}'
    assert _result_json(body) == '["]", "\\"}", {"x": "{"}]'


def test_a_nested_key_of_the_same_name_is_not_the_result() -> None:
    assert _result_json(b'{"payload": {"result": 7}, "result": 8}') == "8"
    assert _result_json(b'{"payload": {"result": 7}}') is None


def test_no_result_or_null_gives_none() -> None:
    assert _result_json(b'{"id": "t"}') is None
    assert _result_json(b'{"id": "t", "result": null}') is None
    assert _result_json(b'{"result": 1, "result": null}') is None


def test_the_last_of_duplicate_keys_wins_as_for_the_parsed_answer() -> None:
    answer = calls.decode(calls.get_task(TID), 200, b'{"result": 1.50, "result": 2.50}')
    assert (answer["result"], answer["result_json"]) == (2.5, "2.50")


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


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=6), _values, max_size=6), _values, st.booleans())
def test_the_text_parses_to_the_result(obj: dict[str, object], value: object,
                                       pretty: bool) -> None:
    obj = {k: v for k, v in obj.items() if k != "result"}
    obj["result"] = value
    body = orjson.dumps(obj, option=orjson.OPT_INDENT_2 if pretty else 0)
    text = _result_json(body)
    if value is None:
        assert text is None
    else:
        assert isinstance(text, str) and orjson.loads(text) == orjson.loads(orjson.dumps(value))
