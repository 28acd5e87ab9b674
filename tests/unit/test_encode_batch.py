"""producer.items.EncodeBatch: what one call's items share. `due` works each distinct delay /
time out once, and never lets a cached value stand for one that is invalid (True == 1, NaN,
unhashable values); `new_id` gives ids of the call's time that never repeat, across the
blocks of random parts it draws."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from wheelq.core.due import due_spec
from wheelq.core.ids import ID_LENGTH, job_id_time_ms
from wheelq.errors import InvalidDelayError
from wheelq.producer.items import EncodeBatch


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
    batch = EncodeBatch(now_ms=1_700_000_000_000)
    first = batch.due(delay, at)
    assert first == due_spec(delay, at, now_ms=batch.now_ms)
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


def test_new_ids_are_of_the_calls_time_and_never_repeat_across_blocks() -> None:
    now_ms = 1_700_000_000_123
    batch = EncodeBatch(now_ms)
    count = 3 * EncodeBatch.MAX_BLOCK_IDS + 7  # blocks of 1, 2, 4, ... then full ones
    ids = [batch.new_id() for _ in range(count)]
    assert len(set(ids)) == count
    assert {len(i) for i in ids} == {ID_LENGTH}
    assert {job_id_time_ms(i) for i in ids} == {now_ms}
