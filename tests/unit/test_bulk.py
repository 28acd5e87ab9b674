"""producer.enqueue_bulk: the columnar encoding writes what the per-item path writes (each envelope
byte for byte, ids of the right shape in the shard `shard_of` names), and bad payloads are
refused by their index before anything is sent."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wheelq.core.ids import ID_LENGTH, job_id_time_ms
from wheelq.core.job import pack_envelope
from wheelq.core.keys import shard_of
from wheelq.core.options import EnqueueItem, stored_values
from wheelq.errors import InvalidArgumentError, PayloadTooLargeError, PayloadTypeError
from wheelq.producer import enqueue_bulk as bulk

NOW_MS = 1_790_000_000_000
TRACE = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
SIZES = [0, 1, 30, 31, 32, 255, 256, 65_534, 65_535, 65_536, 70_000]


@pytest.mark.parametrize("traceparent", [None, TRACE])
def test_each_envelope_is_the_one_pack_envelope_writes(traceparent: str | None) -> None:
    payloads = [b"x" * n for n in SIZES]  # bytes encode to msgpack bin of n bytes
    options = stored_values(EnqueueItem(payload=None), traceparent)
    columns = bulk.encode(payloads, 1 << 20, 7, NOW_MS, options, 1)
    envelopes = columns.shards[0][1]
    for payload, envelope in zip(payloads, envelopes, strict=True):
        packed = bulk._packed([payload], 1 << 20)[0]
        assert envelope == pack_envelope(packed, 1, 7, NOW_MS, traceparent=traceparent)


@given(
    st.lists(
        st.recursive(st.none() | st.integers(-(2**63), 2**64 - 1) | st.text(), st.lists),
        max_size=30,
    )
)
def test_any_plain_payloads_give_the_per_item_envelopes(payloads: list[Any]) -> None:
    columns = bulk.encode(payloads, 1 << 20, 5, NOW_MS, (), 1)
    envelopes = columns.shards[0][1] if payloads else []
    assert envelopes == [
        pack_envelope(bulk._packed([p], 1 << 20)[0], 1, 5, NOW_MS) for p in payloads
    ]


def test_ids_are_generated_unique_in_order_and_grouped_by_their_shard() -> None:
    columns = bulk.encode(list(range(5000)), 1 << 20, 5, NOW_MS, (), 8)
    assert len(columns.ids) == len(set(columns.ids)) == 5000
    assert all(len(i) == ID_LENGTH and job_id_time_ms(i) == NOW_MS for i in columns.ids)
    seen = []
    for shard, (ids, envelopes) in columns.shards.items():
        assert len(ids) == len(envelopes) and ids
        assert {shard_of(i, 8) for i in ids} == {shard}
        seen += ids
    assert sorted(seen) == sorted(columns.ids)
    order = {i: n for n, i in enumerate(columns.ids)}
    for ids, _ in columns.shards.values():  # each shard's share keeps the caller's order
        assert [order[i] for i in ids] == sorted(order[i] for i in ids)


def test_the_writes_for_the_spool_are_in_the_callers_order() -> None:
    from wheelq.core.due import DueSpec

    columns = bulk.encode(["a", "b", "c", "d"], 1 << 20, 5, NOW_MS, (), 3)
    writes = bulk.as_writes(DueSpec("delay", 10), columns)
    assert [w.id for w in writes] == columns.ids
    assert all(w.new and not w.replace for w in writes)


class NotMsgpack:
    pass


@pytest.mark.parametrize(
    ("payloads", "error", "where"),
    [
        (["ok", NotMsgpack(), "ok"], PayloadTypeError, "payloads[1]"),
        (["ok", "ok", b"x" * 100], PayloadTooLargeError, "payloads[2]"),
        ([{"k": {1, 2}}], PayloadTypeError, "payloads[0]"),
    ],
)
def test_a_bad_payload_is_named_by_its_index(
    payloads: list[Any], error: type[Exception], where: str
) -> None:
    with pytest.raises(error) as raised:
        bulk.encode(payloads, 50, 5, NOW_MS, (), 4)
    assert str(raised.value).startswith(f"{where}: ")


@pytest.mark.parametrize("payloads", ["abc", b"abc", {"a": 1}, 7, None])
def test_a_single_payload_is_not_taken_for_many(payloads: Any) -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        bulk.payload_list(payloads)
    assert raised.value.parameter == "payloads"


def test_a_tuple_payload_is_encoded_as_the_per_item_path_does() -> None:
    columns = bulk.encode([(1, 2)], 1 << 20, 5, NOW_MS, (), 1)
    assert columns.shards[0][1][0] == pack_envelope(bulk._packed([[1, 2]], 99)[0], 1, 5, NOW_MS)
