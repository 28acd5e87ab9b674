"""producer.items: `validate_batch` takes a plain item (no field set after ``at``) by a short
path; its write must be the one `validate_item` makes, and an item that only looks plain (a
replace or ordered of 0, which equals False) must still be refused."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wheelq.core.settings import ClientSettings
from wheelq.errors import InvalidArgumentError, PayloadTypeError
from wheelq.producer.items import (
    EncodeBatch,
    EnqueueItem,
    alike,
    columns_of,
    validate_batch,
    validate_item,
)

NOW_MS = 1_700_000_000_000
TRACE = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.mark.parametrize("traceparent", [None, TRACE], ids=["untraced", "traced"])
@pytest.mark.parametrize(
    "item",
    [
        EnqueueItem(payload={"to": "ada"}, delay=30),
        EnqueueItem(payload=b"raw", at=1_800_000_000),
        EnqueueItem(payload=[1], delay=0.5),
    ],
)
def test_a_plain_item_is_written_as_validate_item_writes_it(
    item: EnqueueItem, traceparent: str | None
) -> None:
    settings = ClientSettings(default_max_attempts=7)
    (short,) = validate_batch(settings, [item], traceparent, NOW_MS)
    full = validate_item(settings, item, EncodeBatch(NOW_MS, traceparent))
    assert short._replace(id="") == full._replace(id="")
    assert short.id[:10] == full.id[:10]  # both made at the call's time


@pytest.mark.parametrize(
    ("fields", "parameter"), [({"replace": 0}, "replace"), ({"ordered": 0}, "ordered")]
)
def test_an_item_that_only_equals_a_plain_one_is_still_refused(
    fields: dict[str, Any], parameter: str
) -> None:
    item = EnqueueItem(payload=1, delay=1, **fields)
    assert item[3:] == EnqueueItem(payload=1)[3:]  # 0 == False
    with pytest.raises(InvalidArgumentError) as info:
        validate_batch(ClientSettings(), [EnqueueItem(payload=1, delay=1), item], None, NOW_MS)
    assert info.value.parameter == parameter
    assert str(info.value).startswith("items[1]: ")


# --- the short path against validate_item, on any input -----------------------------------

SMALL = ClientSettings(default_max_attempts=7, max_payload_bytes=64)
leaves = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats()
    | st.text(max_size=12)
    | st.binary(max_size=12)
)
payloads = st.recursive(
    leaves,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
) | st.sampled_from([{1}, {(1, 2): "x"}, object(), "x" * 100])
delays = (
    st.none()
    | st.integers(-5, 10**12)
    | st.floats()
    | st.timedeltas()
    | st.booleans()
    | st.sampled_from(["5", [1]])
)
ats = st.none() | st.integers(-5, 4 * 10**9) | st.floats() | st.datetimes(timezones=st.timezones())


def unset_or(value: st.SearchStrategy[Any], unset: Any = None) -> st.SearchStrategy[Any]:
    """Mostly the field's default (a plain item takes the short path), else `value`."""
    return st.one_of(st.just(unset), st.just(unset), st.just(unset), value)


items = st.builds(
    EnqueueItem,
    payload=payloads,
    delay=delays,
    at=ats,
    job_id=unset_or(st.text(max_size=6)),
    max_attempts=unset_or(st.integers(-1, 1001) | st.booleans()),
    replace=unset_or(st.sampled_from([True, 0, None]), False),
    traceparent=unset_or(st.sampled_from([TRACE, "bad"])),
    callback=unset_or(st.sampled_from(["https://e.com/x", "ftp://x", 3])),
    key=unset_or(st.text(max_size=4)),
    ordered=unset_or(st.sampled_from([True, 0, None]), False),
)


def outcome(run: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "ok", run()
    except (InvalidArgumentError, PayloadTypeError) as exc:
        return "error", exc


@settings(max_examples=400, deadline=None)
@given(
    batch=st.lists(items | items.map(lambda i: i._asdict()), min_size=1, max_size=4),
    traceparent=st.sampled_from([None, TRACE]),
)
def test_the_short_path_gives_what_validate_item_gives_or_the_same_error(
    batch: list[Any], traceparent: str | None
) -> None:
    short = outcome(lambda: validate_batch(SMALL, batch, traceparent, NOW_MS))

    def each() -> list[Any]:
        shared = EncodeBatch(NOW_MS, traceparent)
        out = []
        for index, item in enumerate(batch):
            try:
                out.append(validate_item(SMALL, item, shared))
            except InvalidArgumentError as exc:
                raise type(exc)(exc.parameter, f"items[{index}]: {exc}") from exc
            except PayloadTypeError as exc:
                raise PayloadTypeError(f"items[{index}]: {exc}") from exc
        return out

    full = outcome(each)
    assert short[0] == full[0]
    if short[0] == "error":
        assert type(short[1]) is type(full[1])
        assert str(short[1]) == str(full[1])
        assert getattr(short[1], "parameter", None) == getattr(full[1], "parameter", None)
        return
    generated = [i.get("job_id") if isinstance(i, dict) else i.job_id for i in batch]
    for got, want, own in zip(short[1], full[1], generated, strict=True):
        if own is None:  # a generated id: random past its time part
            assert got.id[:10] == want.id[:10]
            assert got._replace(id="") == want._replace(id="")
        else:
            assert got == want


# --- alike items: enqueue_bulk's columns against the items' path ---------------------------

DELAY, AT = 30, 1_800_000_000


@pytest.mark.parametrize(
    ("batch", "alike_ones"),
    [
        ([EnqueueItem(payload=i, delay=DELAY) for i in range(3)], True),
        ([EnqueueItem(payload=i, at=AT) for i in range(3)], True),
        ([EnqueueItem(payload=i) for i in range(3)], True),  # due now
        ([EnqueueItem(payload=i, delay=DELAY) for i in range(1)], False),  # one: no gain
        ((EnqueueItem(payload=i, delay=DELAY) for i in range(3)), False),  # read once
        (tuple(EnqueueItem(payload=i, delay=DELAY) for i in range(3)), False),
        ([{"payload": i, "delay": DELAY} for i in range(3)], False),
        ([EnqueueItem(payload=1, delay=DELAY), EnqueueItem(payload=2, delay=31)], False),
        # equal values, other objects: due_spec may judge them apart (True == 1)
        ([EnqueueItem(payload=1, delay=1), EnqueueItem(payload=2, delay=True)], False),
        ([EnqueueItem(payload=1, delay=1.5), EnqueueItem(payload=2, delay=float("1.5"))], False),
        ([EnqueueItem(payload=1, job_id="a"), EnqueueItem(payload=2, job_id="b")], False),
        ([EnqueueItem(payload=1), EnqueueItem(payload=2, job_id="b")], False),
        ([EnqueueItem(payload=1), EnqueueItem(payload=2, max_attempts=3)], False),
        ([EnqueueItem(payload=1), EnqueueItem(payload=2, key="k")], False),
        ([EnqueueItem(payload=1), EnqueueItem(payload=2, priority=1)], False),
        ([EnqueueItem(payload=1), EnqueueItem(payload=2, expires=60)], False),
        ([EnqueueItem(payload=1), EnqueueItem(payload=2, traceparent=TRACE)], False),
        ([EnqueueItem(payload=1), EnqueueItem(payload=2, callback="https://e.com/x")], False),
        ([EnqueueItem(payload=1), EnqueueItem(payload=2, replace=0)], False),  # 0 == False
        ([EnqueueItem(payload=1), EnqueueItem(payload=2, ordered=0)], False),
        ([EnqueueItem(payload=1), (2, None, None, None)], False),
    ],
)
def test_only_lists_of_plain_items_sharing_their_timing_objects_are_alike(
    batch: Any, alike_ones: bool
) -> None:
    assert (alike(batch) is not None) is alike_ones


@settings(max_examples=300, deadline=None)
@given(
    st.lists(payloads, min_size=2, max_size=6),
    delays,
    ats,
    st.sampled_from([None, TRACE]),
)
def test_alike_items_are_encoded_as_the_items_path_writes_them_or_left_to_it(
    values: list[Any], delay: Any, at: Any, traceparent: str | None
) -> None:
    """`columns_of` gives what `validate_batch` writes (due, envelopes, ids made at the call's
    time, never repeated), or None where `validate_batch` refuses the batch."""
    batch = [EnqueueItem(payload=v, delay=delay, at=at) for v in values]
    columns = columns_of(SMALL, batch, EncodeBatch(NOW_MS, traceparent))
    full = outcome(lambda: validate_batch(SMALL, batch, traceparent, NOW_MS))
    if columns is None:
        assert full[0] == "error"
        return
    assert full[0] == "ok"
    due, ids, envelopes, lined = columns
    writes = full[1]
    assert [(w.due, w.envelope, w.orders) for w in writes] == [
        (due, envelope, lined) for envelope in envelopes
    ]
    assert [i[:10] for i in ids] == [w.id[:10] for w in writes]
    assert len(set(ids)) == len(ids) and all(len(i) == 26 for i in ids)
