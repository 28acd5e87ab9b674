"""Receipts sealed with an HMAC (`ReceiptSeal`) and the batching of a receipt ack: a
receipt opens only with the key, topic and group it was issued for, any altered field
fails it, and an ack of many receipts of one shard goes to Redis in bounded calls."""

from __future__ import annotations

import base64
from typing import Any

import msgpack
import pytest

from wheelq.errors import InvalidArgumentError
from wheelq.store.call import Call
from wheelq.worker.pull import MAX_RECEIPTS, Outcome, Receipt, ReceiptSeal, ack_receipts
from wheelq.worker.settler import ACKS_PER_CALL

KEY = b"k" * 32
RECEIPT = Receipt(2, "1795593787934-0", "job-1", 1795593787000, "http:a", 1)


def fields(text: str) -> list[Any]:
    out: list[Any] = msgpack.unpackb(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    return out


def text(values: list[Any]) -> str:
    packed = msgpack.packb(values, use_bin_type=True)
    return base64.urlsafe_b64encode(packed).rstrip(b"=").decode("ascii")


def test_a_receipt_opens_with_its_key_topic_and_group_only() -> None:
    issued = ReceiptSeal(KEY).issue(RECEIPT, "t", "g")
    assert ReceiptSeal(KEY).open(issued, "receipts[0]", "t", "g") == RECEIPT
    for seal, topic, group in [
        (ReceiptSeal(b"another key"), "t", "g"),
        (ReceiptSeal(KEY), "t2", "g"),
        (ReceiptSeal(KEY), "t", "g2"),
    ]:
        with pytest.raises(InvalidArgumentError, match=r"^receipts\[3\] is not a receipt"):
            seal.open(issued, "receipts[3]", topic, group)


@pytest.mark.parametrize(
    ("index", "value"),
    [(0, 3), (1, "1795593787934-1"), (2, "never-existed"), (3, 0), (4, "http:b"), (5, 2)],
)
def test_any_field_altered_fails_the_mac(index: int, value: Any) -> None:
    issued = fields(ReceiptSeal(KEY).issue(RECEIPT, "t", "g"))
    issued[index] = value
    with pytest.raises(InvalidArgumentError) as caught:
        ReceiptSeal(KEY).open(text(issued), "receipts[0]", "t", "g")
    assert caught.value.parameter == "receipts[0]"


def test_every_receipt_is_checked_before_any_is_returned() -> None:
    seal = ReceiptSeal(KEY)
    good = seal.issue(RECEIPT, "t", "g")
    forged = text([*fields(good)[:6], b"\0" * 16])
    with pytest.raises(InvalidArgumentError) as caught:
        seal.open_all([good, good, forged], "t", "g")
    assert caught.value.parameter == "receipts[2]"
    with pytest.raises(InvalidArgumentError, match="1 to 10000"):
        seal.open_all([good] * (MAX_RECEIPTS + 1), "t", "g")


class Recorder:
    """An executor that answers each ack call as if every entry was acked."""

    def __init__(self) -> None:
        self.sizes: list[int] = []

    async def run(self, calls: list[Call[Any]], **_: Any) -> list[Any]:
        out = []
        for call in calls:
            n = len(msgpack.unpackb(call.args[1]))
            self.sizes.append(n)
            out.append(call.parse([0, n, [1] * n]))
        return out


async def test_an_ack_of_10000_receipts_of_one_shard_goes_in_bounded_calls() -> None:
    receipts = [Receipt(0, f"1-{i}", f"j{i}", 0, "http:a", 1) for i in range(MAX_RECEIPTS - 1)] + [
        Receipt(1, "2-0", "other", 0, "http:a", 1)
    ]
    executor = Recorder()
    outcomes = await ack_receipts(executor, 5, "t", "g", receipts)  # type: ignore[arg-type]
    assert outcomes == [Outcome.ACKED] * MAX_RECEIPTS
    assert max(executor.sizes) <= ACKS_PER_CALL
    assert sum(executor.sizes) == MAX_RECEIPTS
