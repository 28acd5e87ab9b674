"""The far tier: where a pending job due beyond the topic's horizon is kept, compactly
(docs/architecture.md, "The far tier").

A shard's far tier is leaves: aligned spans of time, a minute to 45 days wide (wide where jobs
are sparse, narrow where they are dense: a full leaf splits into 16), each a Redis list of
packed records (id, due time, envelope: no per-job key, no sorted-set node, no hash entry),
and an index from each job's 8-byte fingerprint to where its record is, spread over small
hashes by linear hashing so that each stays in Redis's compact encoding however many jobs
there are. The scripts
(``_lib.lua``'s ``wq_far_*``) do the work; this module is the same arithmetic in Python, for
the code that reads records and for tests that check the two agree.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

from wheelq.errors import InvalidArgumentError, int_in

WIDTH_MS = 60_000
"""The narrowest leaf's span unless the shard's far meta says otherwise ('width', at most
65,535 ms: a record of a level-0 leaf keeps its due time as u16 ms into the leaf)."""
FANOUT = 16
"""A leaf of level l spans ``width * 16**l`` ms and splits into 16 children of level l - 1."""
TOP_LEVEL = 4
"""The widest leaf: 16**4 minutes, about 45 days."""
LEAF_CAP = 512
"""Records a leaf holds at most (live or not) before it splits; a full level-0 leaf takes no
more, and a job finding it full stays in the sorted set."""
POSITIONS = 4096
"""A location is ``leaf * POSITIONS + position`` (``LEAF_CAP`` < ``POSITIONS``)."""
INDEX_LOAD = 64
"""Index entries per index hash, on average, before one more hash is split off."""
DEFAULT_HORIZON_MS = 0
"""No far tier unless the topic turns it on (its limits hash's ``far``, a horizon in ms)."""
MAX_HORIZON_MS = 366 * 86_400_000
MIN_HORIZON_MS = 10 * WIDTH_MS
"""Shorter, and leaves would be promoted nearly as soon as they fill."""


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


def span(level: int, width_ms: int = WIDTH_MS) -> int:
    """A leaf of `level`'s span in ms."""
    return int(width_ms * FANOUT**level)


def leaf_id(start_ms: int, level: int, width_ms: int = WIDTH_MS) -> int:
    """The id of the leaf of `level` starting at `start_ms` (aligned to its span)."""
    return start_ms // width_ms * 8 + level


def leaf_of(leaf: int, width_ms: int = WIDTH_MS) -> tuple[int, int]:
    """(start ms, level) of a leaf id."""
    return leaf // 8 * width_ms, leaf % 8


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


def location(leaf: int, position: int) -> int:
    return leaf * POSITIONS + position


def split_location(loc: int) -> tuple[int, int]:
    """(leaf, position) of a location."""
    return divmod(loc, POSITIONS)


_HEADER = struct.Struct(">H")
_NARROW = struct.Struct(">H")
_WIDE = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class FarRecord:
    """A record of a leaf: the job's id, due ms and envelope."""

    job_id: str
    due_ms: int
    envelope: bytes


def pack_record(job_id: str, due_ms: int, envelope: bytes, start_ms: int, level: int) -> bytes:
    """``u16 id length, id, due ms into the leaf (u16 at level 0, else u32), envelope``."""
    raw = job_id.encode("utf-8", "surrogatepass")
    offset = (_NARROW if level == 0 else _WIDE).pack(due_ms - start_ms)
    return b"".join((_HEADER.pack(len(raw)), raw, offset, envelope))


def unpack_record(record: bytes, start_ms: int, level: int) -> FarRecord:
    """A record of the leaf at `start_ms` of `level` read back; ValueError if cut short."""
    (n,) = _HEADER.unpack_from(record, 0)
    offset_format = _NARROW if level == 0 else _WIDE
    if len(record) < 2 + n + offset_format.size:
        raise ValueError(f"a far-tier record of {len(record)} bytes is cut short")
    (offset,) = offset_format.unpack_from(record, 2 + n)
    job_id = record[2 : 2 + n].decode("utf-8", "surrogatepass")
    return FarRecord(job_id, start_ms + offset, record[2 + n + offset_format.size :])
