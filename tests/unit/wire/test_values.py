"""The JSON value rules (docs/handlers.md "Results"), on text as it travels."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orbit_wire.errors import ErrorCode, ValueRejected
from orbit_wire.jsonvalue import check_text, check_value, encode_value, utf8_len
from orbit_wire.limits import INT64_MAX, INT64_MIN, MAX_VALUE_BYTES, MAX_VALUE_DEPTH


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("null", ErrorCode.BAD_REQUEST),
        ("{", ErrorCode.INVALID_JSON),
        ("NaN", ErrorCode.INVALID_JSON),
        ("1e400", ErrorCode.NUMBER_OUT_OF_RANGE),
        ("9223372036854775808", ErrorCode.NUMBER_OUT_OF_RANGE),
        ("-9223372036854775809", ErrorCode.NUMBER_OUT_OF_RANGE),
        ('{"a": [1, 99999999999999999999999]}', ErrorCode.NUMBER_OUT_OF_RANGE),
        ("[" * (MAX_VALUE_DEPTH + 1) + "]" * (MAX_VALUE_DEPTH + 1), ErrorCode.NESTING_TOO_DEEP),
        ('"' + "x" * MAX_VALUE_BYTES + '"', ErrorCode.PAYLOAD_TOO_LARGE),
    ],
)
def test_rejected_text_has_a_stable_code(text: str, code: ErrorCode) -> None:
    with pytest.raises(ValueRejected) as info:
        check_text(text)
    assert info.value.code == code


@pytest.mark.parametrize(
    "text",
    [
        str(INT64_MAX),
        str(INT64_MIN),
        "[0.12345678901234567890123]",  # long fraction digits are not an integer
        '{"id": "99999999999999999999999"}',  # digits inside a string are text
        '"\\"99999999999999999999"',  # an escaped quote does not end the string
        "[1e-12345678901234567890]",
        "[" * MAX_VALUE_DEPTH + "]" * MAX_VALUE_DEPTH,
    ],
)
def test_accepted_text(text: str) -> None:
    check_text(text)


def test_null_allowed_where_asked() -> None:
    assert check_text("null", allow_null=True) is None


@given(st.integers())
def test_integer_range_is_exactly_signed_64_bit(n: int) -> None:
    inside = INT64_MIN <= n <= INT64_MAX
    for check in (lambda: check_text(str(n)), lambda: check_value(n)):
        if inside:
            check()
        else:
            with pytest.raises(ValueRejected):
                check()


def test_non_finite_floats_and_foreign_types_rejected_when_encoding() -> None:
    for value in (float("nan"), float("inf"), {"a": object()}):
        with pytest.raises(ValueRejected):
            encode_value(value)
    assert encode_value({"text": "ok", "n": 1.5}) == b'{"text":"ok","n":1.5}'


def test_utf8_len_counts_encoded_bytes() -> None:
    assert utf8_len('{"a":1}') == 7
    assert utf8_len('"é€😀"') == len('"é€😀"'.encode()) == 11
    assert utf8_len(b'{"a":1}') == 7
