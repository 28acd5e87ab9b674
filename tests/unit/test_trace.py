"""core.trace: the W3C traceparent a job carries, validated on enqueue, parsed leniently."""

from __future__ import annotations

import pytest

from wheelq.core.trace import format_traceparent, parse_traceparent, validate_traceparent
from wheelq.errors import InvalidArgumentError

GOOD = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

BAD = [
    "",
    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",  # no flags
    "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # another version
    "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  # upper case
    "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # zero trace id
    "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  # zero span id
    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",  # trailing text
    " 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",  # not hex
]


def test_a_valid_traceparent_and_none_pass_validation() -> None:
    assert validate_traceparent(GOOD) == GOOD
    assert validate_traceparent(None) is None


@pytest.mark.parametrize("value", [*BAD, b"00-ab", 7, ["00"]])
def test_a_bad_traceparent_is_a_typed_error_naming_the_parameter(value: object) -> None:
    with pytest.raises(InvalidArgumentError, match=r"^traceparent must be a W3C") as info:
        validate_traceparent(value)
    assert info.value.parameter == "traceparent"
    assert isinstance(info.value, ValueError)


def test_parse_reads_the_ids_and_flags() -> None:
    assert parse_traceparent(GOOD) == (0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7, 1)


@pytest.mark.parametrize("value", [*BAD, None])
def test_parse_of_anything_else_is_none_and_never_raises(value: str | None) -> None:
    assert parse_traceparent(value) is None


def test_format_is_the_inverse_of_parse() -> None:
    parsed = parse_traceparent(GOOD)
    assert parsed is not None
    assert format_traceparent(*parsed) == GOOD
    assert format_traceparent(1, 2, 0) == "00-" + "0" * 31 + "1-" + "0" * 15 + "2-00"
