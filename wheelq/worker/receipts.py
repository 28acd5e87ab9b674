"""Receipts of pulled jobs: what a pull consumer hands back to ack or nack a job.

A receipt is opaque to its holder: base64url of msgpack ``[shard, entry id, job id, pulled
ms, consumer, deliveries]``. It grants nothing a write token does not already: it only names
one delivery of an entry, the consumer the group's pending list holds it for and its
delivery count then. A delivery ends when the visibility timeout passes and another pull
takes the entry over (count + 1): the old receipt is then *stale* and settles nothing, as an
SQS receipt handle of an earlier receive (the scripts check it, `wq_delivered`).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

import msgpack

from wheelq.errors import InvalidArgumentError

MAX_RECEIPTS = 10_000
MAX_RECEIPT_CHARS = 2000
_ENTRY_ID = re.compile(r"[0-9]{1,20}-[0-9]{1,20}")


class Outcome(StrEnum):
    """What settling one receipt did."""

    ACKED = "acked"
    RETRIED = "retried"
    DEAD_LETTERED = "dead_lettered"
    SETTLED_BEFORE = "settled_before"
    """The entry was no longer pending: settled already (this receipt again, or the delivery
    that took it over); nothing changed."""
    STALE = "stale"
    """The entry is pending to a later delivery (taken over after the visibility timeout):
    the receipt settles nothing; the newest receipt does."""


@dataclass(frozen=True, slots=True)
class Receipt:
    """What a receipt names: the entry, its job, when it was pulled (ms), and the delivery:
    the consumer it is pending to and its delivery count at the pull."""

    shard: int
    entry_id: str
    job_id: str
    pulled_ms: int
    consumer: str
    deliveries: int

    def encode(self) -> str:
        packed = msgpack.packb(
            [
                self.shard,
                self.entry_id,
                self.job_id,
                self.pulled_ms,
                self.consumer,
                self.deliveries,
            ]
        )
        return base64.urlsafe_b64encode(packed).rstrip(b"=").decode("ascii")

    @classmethod
    def decode(cls, text: object, where: str) -> Receipt:
        """Raises: InvalidArgumentError naming `where` when `text` is not a receipt."""
        fields: object = None
        if isinstance(text, str) and len(text) <= MAX_RECEIPT_CHARS:
            try:
                fields = msgpack.unpackb(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
            except (ValueError, TypeError, binascii.Error, msgpack.UnpackException):
                fields = None
        if (
            isinstance(fields, list)
            and len(fields) == 6
            and isinstance(fields[0], int)
            and fields[0] >= 0
            and isinstance(fields[1], str)
            and _ENTRY_ID.fullmatch(fields[1])
            and isinstance(fields[2], str)
            and isinstance(fields[3], int)
            and isinstance(fields[4], str)
            and isinstance(fields[5], int)
            and fields[5] >= 1
        ):
            return cls(*fields)
        raise InvalidArgumentError(
            where, f"{where} is not a receipt this service gave, got {text!r:.60}"
        )


def parse_receipts(receipts: Sequence[object]) -> list[Receipt]:
    """Decode a list of receipts.

    Raises:
        InvalidArgumentError: Not a list of 1 to 10,000 receipts; names ``receipts[i]``
            for the first that is not one.
    """
    if isinstance(receipts, str | bytes) or not isinstance(receipts, Sequence):
        raise InvalidArgumentError("receipts", "receipts must be a list of receipts")
    if not 1 <= len(receipts) <= MAX_RECEIPTS:
        raise InvalidArgumentError(
            "receipts", f"receipts must hold 1 to {MAX_RECEIPTS} receipts, got {len(receipts)}"
        )
    return [Receipt.decode(r, f"receipts[{i}]") for i, r in enumerate(receipts)]
