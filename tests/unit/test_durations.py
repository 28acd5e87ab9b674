"""One unit on the Python face (issue 59, item 4): `core.due.duration_ms` reads a duration
given in seconds (int, float) or a timedelta, or its documented ``_ms`` alias, one spelling
per field, and refuses bad values naming the parameter; `RetryPolicy(base=, max=)` and a
task's ``result_ttl`` go through it (docs/guides/tasks.md)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

import wheelq
from wheelq.core.due import MAX_DELAY_MS, duration_ms
from wheelq.core.retry import RetryPolicy
from wheelq.errors import InvalidArgumentError, InvalidDelayError

# --- the conversion -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "ms", "expected"),
    [
        (1, None, 1000),
        (0, None, 0),
        (1.5, None, 1500),
        (0.0001, None, 1),  # rounded up to a whole ms, never down to nothing
        (0.1 + 0.2, None, 300),  # float noise is not rounded up
        (timedelta(minutes=2), None, 120_000),
        (timedelta(microseconds=1), None, 1),
        (None, 250, 250),
        (None, 0, 0),
        (None, None, 42),  # the default
    ],
)
def test_a_duration_in_seconds_a_timedelta_or_ms_is_whole_ms(
    seconds: Any, ms: Any, expected: int
) -> None:
    assert duration_ms(seconds, ms, name="wait", alias="wait_ms", default=42) == expected


@pytest.mark.parametrize(
    ("seconds", "ms", "parameter"),
    [
        (1, 1000, "wait"),  # both spellings: the error names both
        (float("nan"), None, "wait"),
        (float("inf"), None, "wait"),
        (-1, None, "wait"),
        (timedelta(seconds=-1), None, "wait"),
        (True, None, "wait"),
        ("5", None, "wait"),
        (10**400, None, "wait"),  # a Python int too large for a float
        (11, None, "wait"),  # over max_ms
        (0.0001, None, "wait"),  # under min_ms once in ms
        (None, -1, "wait_ms"),
        (None, 1.5, "wait_ms"),
        (None, True, "wait_ms"),
        (None, "5", "wait_ms"),
        (None, 10_001, "wait_ms"),
        (None, 1, "wait_ms"),  # under min_ms
    ],
)
def test_a_bad_duration_is_refused_naming_the_spelling_given(
    seconds: Any, ms: Any, parameter: str
) -> None:
    with pytest.raises(InvalidArgumentError) as refused:
        duration_ms(seconds, ms, name="wait", alias="wait_ms", max_ms=10_000, min_ms=2)
    assert refused.value.parameter == parameter
    if seconds is not None and ms is not None:
        assert "wait" in str(refused.value) and "wait_ms" in str(refused.value)
    elif seconds is not None:
        assert isinstance(refused.value, InvalidDelayError)


def test_the_range_is_the_callers_and_said_in_seconds() -> None:
    with pytest.raises(InvalidDelayError, match=r"<= 86400, got 86401"):
        duration_ms(86_401, None, name="base", alias="base_ms", max_ms=86_400_000)
    assert duration_ms(86_400, None, name="base", alias="base_ms", max_ms=86_400_000) == (
        86_400_000
    )
    assert duration_ms(MAX_DELAY_MS // 1000, None, name="d", alias="d_ms") == MAX_DELAY_MS


# --- RetryPolicy ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "base_ms", "max_ms"),
    [
        ({}, 1000, 3_600_000),  # the defaults, unchanged
        ({"base": 2, "max": 60}, 2000, 60_000),
        ({"base": 0.25, "max": timedelta(minutes=5)}, 250, 300_000),
        ({"base": timedelta(milliseconds=20), "max": 0.02}, 20, 20),
        ({"base_ms": 20, "max_ms": 20}, 20, 20),  # the aliases
        ({"base": 1, "max_ms": 5000}, 1000, 5000),  # one spelling per field, mixed
        ({"base": 0}, 0, 3_600_000),
        ({"base": 86_400, "max": timedelta(days=30)}, 86_400_000, 30 * 86_400_000),
    ],
)
def test_retry_policy_takes_seconds_a_timedelta_or_the_ms_aliases(
    kwargs: dict[str, Any], base_ms: int, max_ms: int
) -> None:
    policy = RetryPolicy(**kwargs)
    assert (policy.base_ms, policy.max_ms) == (base_ms, max_ms)  # what the worker reads
    assert policy == RetryPolicy(base_ms=base_ms, max_ms=max_ms)


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"base": 1, "base_ms": 1000}, "base"),
        ({"max": 1, "max_ms": 1000}, "max"),
        ({"base": float("nan")}, "base"),
        ({"max": float("inf")}, "max"),
        ({"base": -1}, "base"),
        ({"max": timedelta(seconds=-1)}, "max"),
        ({"base": True}, "base"),
        ({"max": "60"}, "max"),
        ({"base": 86_401}, "base"),  # over a day, as retry_base_ms
        ({"max": timedelta(days=31)}, "max"),  # over 30 days, as retry_max_ms
        ({"base_ms": -1}, "base_ms"),
        ({"max_ms": 1.5}, "max_ms"),
        ({"base_ms": False}, "base_ms"),
        ({"jitter_pct": 101}, "jitter_pct"),
        ({"jitter_pct": -1}, "jitter_pct"),
        ({"jitter_pct": 1.5}, "jitter_pct"),
        ({"jitter_pct": True}, "jitter_pct"),
    ],
)
def test_a_bad_retry_policy_is_refused_naming_the_parameter(
    kwargs: dict[str, Any], parameter: str
) -> None:
    with pytest.raises(InvalidArgumentError) as refused:
        RetryPolicy(**kwargs)
    assert refused.value.parameter == parameter
    if parameter in ("base", "max") and f"{parameter}_ms" in kwargs:
        assert f"{parameter}_ms" in str(refused.value)  # names both spellings


def test_retry_policy_takes_no_positional_number_in_either_unit() -> None:
    with pytest.raises(TypeError):
        RetryPolicy(1000, 60_000, 20)  # type: ignore[misc]


def test_retry_policy_backs_off_by_the_seconds_it_was_given() -> None:
    policy = RetryPolicy(base=1.5, max=5, jitter_pct=0)
    assert [policy.backoff_ms(n, 0.0) for n in (1, 2, 3)] == [1500, 3000, 5000]


# --- a task's result_ttl --------------------------------------------------------------------

APP = wheelq.App("redis://127.0.0.1:1")  # never connected: the options are checked locally


def send(n: int) -> int:
    return n


@pytest.mark.parametrize(
    ("result_ttl", "ttl_ms"),
    [
        (None, None),  # the default: as long as the job's record
        (1, 1000),
        (0.5, 500),
        (timedelta(days=1), 86_400_000),
        (0.0001, 1),
    ],
)
def test_result_ttl_is_seconds_or_a_timedelta_and_reaches_the_route(
    result_ttl: Any, ttl_ms: int | None
) -> None:
    task = APP.task(name=f"ttl{ttl_ms}", topic=f"ttl{ttl_ms}", result_ttl=result_ttl)(send)
    assert task.route().result_ttl_ms == ttl_ms


@pytest.mark.parametrize(
    "kwargs",
    [
        {"result_ttl": 0},
        {"result_ttl": -1},
        {"result_ttl": float("nan")},
        {"result_ttl": True},
        {"result_ttl": "60"},
        {"result_ttl": timedelta(0)},
        {"result_ttl": 60, "result": False},  # nothing kept to expire
    ],
)
def test_a_bad_result_ttl_is_refused_at_declaration(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgumentError) as refused:
        APP.task(name="bad", topic="bad", **kwargs)(send)
    assert refused.value.parameter == "result_ttl"


def test_a_route_refuses_a_result_ttl_out_of_range() -> None:
    with pytest.raises(InvalidArgumentError) as refused:
        wheelq.Route(send, result_ttl_ms=0)
    assert refused.value.parameter == "result_ttl_ms"
