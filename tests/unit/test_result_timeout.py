"""`result()`'s timeout: finite seconds in [0, a day], as ms rounded up; anything else is a
typed error naming it, raised before anything is sent."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest

from wheelq.errors import InvalidArgumentError
from wheelq.producer.results import timeout_ms


@pytest.mark.parametrize(
    ("timeout", "ms"),
    [(0, 0), (0.0001, 1), (1.5, 1500), (timedelta(seconds=2), 2000), (86_400, 86_400_000)],
)
def test_a_timeout_in_range_is_whole_ms_rounded_up(timeout: object, ms: int) -> None:
    assert timeout_ms(timeout) == ms


@pytest.mark.parametrize(
    "timeout",
    [-1, -0.001, math.nan, math.inf, -math.inf, 86_400.001, "5", None, True, timedelta(days=2)],
)
def test_a_bad_timeout_names_the_parameter_and_its_range(timeout: object) -> None:
    with pytest.raises(InvalidArgumentError) as bad:
        timeout_ms(timeout)
    assert bad.value.parameter == "timeout"
    said = str(bad.value)  # as every duration says it (`wheelq.core.due.delay_ms`)
    assert said.startswith("timeout must be "), said
    assert "<= 86400" in said or "or a timedelta" in said, said
