"""producer.encode_batch: what one call's items share. `due` works each distinct delay / time
out once, and never lets a cached value stand for one that is invalid (True == 1, NaN,
unhashable values)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from wheelq.core.schedule import due_spec
from wheelq.errors import InvalidDelayError
from wheelq.producer.encode_batch import EncodeBatch


@pytest.mark.parametrize(
    ("delay", "at"),
    [
        (1, None),
        (0.3, None),
        (timedelta(seconds=2), None),
        (None, 1_700_000_000),
        (None, datetime(2030, 1, 1, tzinfo=UTC)),
        (None, None),
    ],
)
def test_due_is_due_spec_and_asked_again_gives_the_same(delay: Any, at: Any) -> None:
    batch = EncodeBatch(now_ms=0)
    first = batch.due(delay, at)
    assert first == due_spec(delay, at)
    assert batch.due(delay, at) is first


def test_a_cached_int_delay_does_not_let_a_bool_through() -> None:
    batch = EncodeBatch(now_ms=0)
    assert batch.due(1, None).value_ms == 1000
    with pytest.raises(InvalidDelayError, match="delay"):
        batch.due(True, None)


@pytest.mark.parametrize("delay", [math.nan, -1, [1], {"s": 1}])
def test_invalid_delays_raise_every_time(delay: Any) -> None:
    batch = EncodeBatch(now_ms=0)
    for _ in range(2):
        with pytest.raises(InvalidDelayError, match="delay"):
            batch.due(delay, None)
