"""Receipts of pulled jobs: what a pull consumer hands back to ack or nack a job.

A receipt is opaque to its holder: base64url of msgpack ``[shard, entry id, job id, pulled
ms, consumer, deliveries, mac]``. It names one delivery of an entry, the consumer the
group's pending list holds it for and its delivery count then; ``mac`` is an HMAC-SHA256
(first `MAC_BYTES` bytes) over every other field, the topic and the group, with a key the
deployment shares (`ReceiptSeal`), so a receipt is only ever one a service gave, for that
topic and group: a made-up job id, entry or delivery count does not verify, and nothing is
settled. A delivery ends when the visibility timeout passes and another pull takes the
entry over (count + 1): the old receipt is then *stale* and settles nothing, as an SQS
receipt handle of an earlier receive (the scripts check it, `wq_delivered`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

import msgpack

from wheelq.errors import InvalidArgumentError

MAX_RECEIPTS = 10_000
MAX_RECEIPT_CHARS = 2000
MAC_BYTES = 16
"""An HMAC-SHA256 truncated to 128 bits: forging one is a 2**-128 guess per try."""
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


class ReceiptSeal:
    """Issues receipts and checks them: the MAC of a receipt's fields, topic and group.

    Args:
        key: The HMAC key, the same on every service of a deployment (a load balancer may
            send the ack to another instance than the pull).
    """

    def __init__(self, key: bytes) -> None:
        if not key:
            raise ValueError("key must not be empty")
        self._key = key

    def _mac(self, fields: list[object], topic: str, group: str) -> bytes:
        signed = msgpack.packb([topic, group, *fields], use_bin_type=True)
        return hmac.new(self._key, signed, hashlib.sha256).digest()[:MAC_BYTES]

    def issue(self, receipt: Receipt, topic: str, group: str) -> str:
        """The receipt's text, sealed for `topic` and `group`."""
        fields: list[object] = [
            receipt.shard,
            receipt.entry_id,
            receipt.job_id,
            receipt.pulled_ms,
            receipt.consumer,
            receipt.deliveries,
        ]
        packed = msgpack.packb([*fields, self._mac(fields, topic, group)], use_bin_type=True)
        return base64.urlsafe_b64encode(packed).rstrip(b"=").decode("ascii")

    def open(self, text: object, where: str, topic: str, group: str) -> Receipt:
        """The receipt `text` names, once its MAC verifies for `topic` and `group`.

        Raises:
            InvalidArgumentError: Naming `where`: not a receipt, or not one a service of this
                deployment gave for this topic and group (forged, altered, or another's).
        """
        fields: object = None
        if isinstance(text, str) and len(text) <= MAX_RECEIPT_CHARS:
            try:
                fields = msgpack.unpackb(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
            except (ValueError, TypeError, binascii.Error, msgpack.UnpackException):
                fields = None
        if (
            isinstance(fields, list)
            and len(fields) == 7
            and isinstance(fields[0], int)
            and fields[0] >= 0
            and isinstance(fields[1], str)
            and _ENTRY_ID.fullmatch(fields[1])
            and isinstance(fields[2], str)
            and isinstance(fields[3], int)
            and isinstance(fields[4], str)
            and isinstance(fields[5], int)
            and fields[5] >= 1
            and isinstance(fields[6], bytes)
            and hmac.compare_digest(fields[6], self._mac(fields[:6], topic, group))
        ):
            return Receipt(*fields[:6])
        raise InvalidArgumentError(
            where,
            f"{where} is not a receipt this service gave for this topic and group "
            f"(altered, forged, or another's), got {text!r:.60}; nothing was changed",
        )

    def open_all(self, receipts: Sequence[object], topic: str, group: str) -> list[Receipt]:
        """Check and decode a list of receipts: every one before any is settled.

        Raises:
            InvalidArgumentError: Not a list of 1 to 10,000 receipts; names ``receipts[i]``
                for the first that is not one this deployment gave for the topic and group.
        """
        if isinstance(receipts, str | bytes) or not isinstance(receipts, Sequence):
            raise InvalidArgumentError("receipts", "receipts must be a list of receipts")
        if not 1 <= len(receipts) <= MAX_RECEIPTS:
            raise InvalidArgumentError(
                "receipts",
                f"receipts must hold 1 to {MAX_RECEIPTS} receipts, got {len(receipts)}",
            )
        return [self.open(r, f"receipts[{i}]", topic, group) for i, r in enumerate(receipts)]
