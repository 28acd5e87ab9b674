"""The far tier: where a pending job due beyond the topic's horizon is kept, compactly
(docs/architecture.md, "The far tier").

A shard's far tier is time buckets of `BUCKET_MS`, each a Redis list of packed records (id,
due time, envelope: no per-job key, no sorted-set node, no hash entry), and an index from each
job's 8-byte fingerprint to where its record is, spread over small hashes by linear hashing so
that each stays in Redis's compact encoding however many jobs there are. The scripts
(``_lib.lua``'s ``wq_far_*``) do the work; this module is the same arithmetic in Python, for
the code that reads records and for tests that check the two agree.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

from wheelq.errors import InvalidArgumentError, int_in

BUCKET_MS = 60_000
"""A bucket's span unless the shard's far meta says otherwise ('width', at most 65,535 ms:
a record keeps its due time as u16 ms into its bucket): a job due at ``due`` is in bucket
``due // width``."""
BUCKET_CAP = 2048
"""Records a bucket holds at most (live or not); a job finding its bucket full stays hot."""
POSITIONS = 4096
"""A location is ``bucket * POSITIONS + position`` (``BUCKET_CAP`` < ``POSITIONS``)."""
INDEX_LOAD = 64
"""Index entries per index hash, on average, before one more hash is split off."""
DEFAULT_HORIZON_MS = 0
"""No far tier unless the topic turns it on (its limits hash's ``far``, a horizon in ms)."""
MAX_HORIZON_MS = 366 * 86_400_000
MIN_HORIZON_MS = 10 * BUCKET_MS
"""Shorter, and buckets would be promoted nearly as soon as they fill."""


def validate_horizon(horizon_ms: object) -> int:
    """A topic's far horizon: 0 (no far tier) or an int in [`MIN_HORIZON_MS`,
    `MAX_HORIZON_MS`], else InvalidArgumentError naming ``far_horizon_ms``."""
    if horizon_ms == 0 and not isinstance(horizon_ms, bool):
        return 0
    try:
        return int_in("far_horizon_ms", horizon_ms, MIN_HORIZON_MS, MAX_HORIZON_MS)
    except InvalidArgumentError:
        raise InvalidArgumentError(
            "far_horizon_ms",
            f"far_horizon_ms must be 0 (no far tier) or an int in [{MIN_HORIZON_MS}, "
            f"{MAX_HORIZON_MS}], got {horizon_ms!r:.40}",
        ) from None


def bucket_of(due_ms: int, width_ms: int = BUCKET_MS) -> int:
    return due_ms // width_ms


def fingerprint(job_id: str) -> bytes:
    """The first 8 bytes of the id's SHA1 (``redis.sha1hex`` in the scripts)."""
    raw = job_id.encode("utf-8", "surrogatepass")
    return hashlib.sha1(raw, usedforsecurity=False).digest()[:8]


def index_address(fp: bytes, level: int, split: int) -> int:
    """Which index hash holds `fp`: linear hashing on the fingerprint's first 32 bits, with
    ``2**level + split`` hashes in use (hashes below `split` are split already)."""
    h = int.from_bytes(fp[:4], "big")
    address = h % (1 << level)
    if address < split:
        address = h % (1 << (level + 1))
    return address


def location(bucket: int, position: int) -> int:
    return bucket * POSITIONS + position


def split_location(loc: int) -> tuple[int, int]:
    """(bucket, position) of a location."""
    return divmod(loc, POSITIONS)


_HEADER = struct.Struct(">H")


@dataclass(frozen=True, slots=True)
class FarRecord:
    """A record of a bucket: the job's id, due ms and envelope."""

    job_id: str
    due_ms: int
    envelope: bytes


def pack_record(job_id: str, due_ms: int, envelope: bytes, width_ms: int = BUCKET_MS) -> bytes:
    """``u16 id length, id, u16 due ms within its bucket, envelope``."""
    raw = job_id.encode("utf-8", "surrogatepass")
    return b"".join((_HEADER.pack(len(raw)), raw, _HEADER.pack(due_ms % width_ms), envelope))


def unpack_record(record: bytes, bucket: int, width_ms: int = BUCKET_MS) -> FarRecord:
    """A record of `bucket` read back; ValueError if it is cut short."""
    (n,) = _HEADER.unpack_from(record, 0)
    if len(record) < 4 + n:
        raise ValueError(f"a far-tier record of {len(record)} bytes is cut short")
    (offset,) = _HEADER.unpack_from(record, 2 + n)
    job_id = record[2 : 2 + n].decode("utf-8", "surrogatepass")
    return FarRecord(job_id, bucket * width_ms + offset, record[4 + n :])
