"""A topic's limits and due-line settings, pure: what `set_limits` accepts (each bad value
refused naming its parameter and range, before anything is written), the ``{T:s}:limits``
fields a change writes, and the settings read back from a shard's hashes
(docs/architecture.md, "Backpressure" and "The due line")."""

from __future__ import annotations

from typing import Any

import pytest

from wheelq.core.flow import (
    DEFAULT_CREDIT_MS,
    MAX_CREDIT_MS,
    MAX_FAIR_WEIGHTS,
    UNCHANGED,
    LimitsChange,
    TopicLimits,
    validate_limits,
)
from wheelq.errors import InvalidArgumentError

BAD: list[tuple[str, Any, str]] = [
    ("max_pending", 0, "[1, 1099511627776]"),
    ("max_pending", True, "[1, 1099511627776]"),
    ("max_ready", 2.5, "[1, 1099511627776]"),
    ("max_ready", 2**40 + 1, "[1, 1099511627776]"),
    ("priority_credit_ms", -1, f"[0, {MAX_CREDIT_MS}]"),
    ("priority_credit_ms", MAX_CREDIT_MS + 1, f"[0, {MAX_CREDIT_MS}]"),
    ("priority_credit_ms", True, f"[0, {MAX_CREDIT_MS}]"),
    ("priority_credit_ms", 1.5, f"[0, {MAX_CREDIT_MS}]"),
    ("priority_credit_ms", "1000", f"[0, {MAX_CREDIT_MS}]"),
    ("fair", 1, "True, False or None"),
    ("fair", "yes", "True, False or None"),
    ("fair_weights", [("a", 2)], "mapping"),
    ("fair_weights", "a=2", "mapping"),
    ("fair_weights", {"a": 0}, "[1, 1000]"),
    ("fair_weights", {"a": 1001}, "[1, 1000]"),
    ("fair_weights", {"a": True}, "[1, 1000]"),
    ("fair_weights", {"a": 2.0}, "[1, 1000]"),
    ("fair_weights", {"": 2}, "1-256 UTF-8 bytes"),
    ("fair_weights", {"a\nb": 2}, "1-256 UTF-8 bytes"),
    ("fair_weights", {"é" * 129: 2}, "1-256 UTF-8 bytes"),
    ("fair_weights", {7: 2}, "1-256 UTF-8 bytes"),
    ("fair_weights", {f"k{i}": 1 for i in range(MAX_FAIR_WEIGHTS + 1)}, "at most 10,000"),
]


@pytest.mark.parametrize(
    ("parameter", "value", "range_"), BAD, ids=[f"{p}={v!r:.20}" for p, v, _ in BAD]
)
def test_a_bad_value_is_refused_naming_its_parameter_and_range(
    parameter: str, value: Any, range_: str
) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        validate_limits(**{parameter: value})
    assert info.value.parameter == parameter
    assert range_ in str(info.value)


def test_a_bad_value_beside_good_ones_is_refused_all_the_same() -> None:
    """Every value is checked before the change exists, whatever its place in the call."""
    with pytest.raises(InvalidArgumentError) as info:
        validate_limits(10, 20, 500, True, {"a": 2, "b": 0})
    assert info.value.parameter == "fair_weights"


def test_a_call_changes_only_the_settings_it_names() -> None:
    assert validate_limits() == LimitsChange({}, {}, None)
    assert validate_limits().fields(4) == {}
    assert validate_limits(max_ready=None).fields(4) == {"ready": None, "max_ready": None}
    assert validate_limits(priority_credit_ms=0).fields(4) == {"credit": 0}


def test_a_limit_is_shared_between_shards_and_the_due_line_is_the_same_on_each() -> None:
    change = validate_limits(max_pending=10, priority_credit_ms=250, fair=True)
    assert change.fields(4) == {
        "pending": 3,
        "max_pending": 10,
        "credit": 250,
        "fair": 1,
        "ordered": 1,
    }


def test_fair_off_removes_fair_and_leaves_ordered() -> None:
    """``ordered`` only says held jobs may exist: the scripts still drain them."""
    assert validate_limits(fair=False).fields(1) == {"fair": None}


def test_weights_replace_the_topics_and_an_empty_mapping_clears_them() -> None:
    assert validate_limits(fair_weights={"a": 1, "b": 1000}).weights == {"a": 1, "b": 1000}
    assert validate_limits(fair_weights={}).weights == {}
    assert validate_limits(fair=True).weights is None
    assert UNCHANGED is not None and repr(UNCHANGED) == "UNCHANGED"


def test_settings_read_back_from_a_shards_hashes() -> None:
    assert TopicLimits.from_fields({}, {}) == TopicLimits(None, None, DEFAULT_CREDIT_MS, False, {})
    raw = {b"max_pending": b"10", b"pending": b"3", b"credit": b"0", b"fair": b"1", b"far": b"0"}
    weights = {"tenant-é".encode(): b"7"}
    assert TopicLimits.from_fields(raw, weights) == TopicLimits(10, None, 0, True, {"tenant-é": 7})
