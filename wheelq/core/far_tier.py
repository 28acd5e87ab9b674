"""The far tier: where a pending job due beyond the topic's horizon is kept, compactly
(docs/architecture.md, "The far tier").

A shard's far tier is leaves: aligned spans of time, a minute to 45 days wide (wide where jobs
are sparse, narrow where they are dense: a full leaf splits into 16), each a Redis list of
packed records (id, due time, envelope: no per-job key, no sorted-set node, no hash entry),
and an index from each job's 8-byte fingerprint to where its record is, spread over small
hashes by linear hashing so that each stays in Redis's compact encoding however many jobs
there are. The scripts (``wq_far_*`` of ``store/lua/includes/far_tier.lua``) do the work;
this module is the same arithmetic in Python, for the code that reads records and for tests
that check the two agree.
"""

from __future__ import annotations

import hashlib
import re
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
POSITIONS = 512
"""A location is ``leaf * POSITIONS + position`` (``LEAF_CAP`` <= ``POSITIONS``), stored in 5
bytes, big-endian."""
EPOCH_MS = 1_700_000_000_000
"""Leaf ids count widths from here (2023-11-14; no far job is due before it), so they stay
small."""
FINGERPRINT_BYTES = 6
MAX_ID_BYTES = 255
"""A far record keeps its id's length in a byte: a longer id stays in the sorted set."""
INDEX_LOAD = 32
"""Index entries per index hash, on average, before one more hash is split off. A hash not
split yet this round holds up to twice as many: at 32 the largest of 6,252 hashes held 70
entries (200,000 jobs), well under Redis's 128 (`hash-max-listpack-entries`), past which a
hash leaves the listpack for good; at 64 two of 3,126 held 130. An index write scans its
hash twice (HSETNX), so 32 also took a far job's Redis work from 104k to 93k instructions
for one more byte a job (`loadtest/far_profile.py`, `loadtest/memory_per_job.py`)."""
DEFAULT_HORIZON_MS = 3_600_000
"""A topic's horizon until set (`Admin.set_far_horizon`; kept in its limits hash's ``far``,
in ms, 0: no far tier): jobs due over an hour ahead are kept in the far tier."""
MAX_HORIZON_MS = 366 * 86_400_000
MIN_HORIZON_MS = 10 * WIDTH_MS
"""Shorter, and leaves would be promoted nearly as soon as they fill."""


def validate_horizon(horizon_ms: object) -> int:
    """A topic's far horizon: 0 (no far tier) or an int in [`MIN_HORIZON_MS`,
    `MAX_HORIZON_MS`], else InvalidArgumentError naming ``horizon_ms``."""
    if horizon_ms == 0 and not isinstance(horizon_ms, bool):
        return 0
    try:
        return int_in("horizon_ms", horizon_ms, MIN_HORIZON_MS, MAX_HORIZON_MS)
    except InvalidArgumentError:
        raise InvalidArgumentError(
            "horizon_ms",
            f"horizon_ms must be 0 (no far tier) or an int in [{MIN_HORIZON_MS}, "
            f"{MAX_HORIZON_MS}], got {horizon_ms!r:.40}",
        ) from None


def span(level: int, width_ms: int = WIDTH_MS) -> int:
    """A leaf of `level`'s span in ms."""
    return int(width_ms * FANOUT**level)


def leaf_id(start_ms: int, level: int, width_ms: int = WIDTH_MS) -> int:
    """The id of the leaf of `level` starting at `start_ms` (aligned to its span)."""
    return (start_ms // width_ms - EPOCH_MS // width_ms) * 8 + level


def leaf_of(leaf: int, width_ms: int = WIDTH_MS) -> tuple[int, int]:
    """(start ms, level) of a leaf id."""
    return (leaf // 8 + EPOCH_MS // width_ms) * width_ms, leaf % 8


def fingerprint(job_id: str) -> bytes:
    """The first 6 bytes of the id's SHA1 (``redis.sha1hex`` in the scripts)."""
    raw = job_id.encode("utf-8", "surrogatepass")
    return hashlib.sha1(raw, usedforsecurity=False).digest()[:FINGERPRINT_BYTES]


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


def split_location(loc: bytes) -> tuple[int, int]:
    """(leaf, position) of a location as stored."""
    return divmod(int.from_bytes(loc, "big"), POSITIONS)


_OFFSET_BYTES = (2, 3, 3, 4, 4)
"""By level: the bytes of a record's due ms into its leaf."""


@dataclass(frozen=True, slots=True)
class FarRecord:
    """A record of a leaf: the job's id, due ms and envelope."""

    job_id: str
    due_ms: int
    envelope: bytes


_B32 = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_GENERATED = re.compile(r"[0-7][0-9A-HJKMNP-TV-Z]{25}")
"""A generated id (`wheelq.core.ids`): 26 base32 characters, 128 bits."""


def id_bytes(job_id: str) -> bytes:
    """How a record keeps an id: 0 and its 128 bits when generated, else its length and its
    UTF-8 bytes."""
    if _GENERATED.fullmatch(job_id):
        value = 0
        for ch in job_id:
            value = value * 32 + _B32.index(ch)
        return b"\0" + value.to_bytes(16, "big")
    raw = job_id.encode("utf-8", "surrogatepass")
    return bytes((len(raw),)) + raw


def _id_of(record: bytes) -> tuple[str, int]:
    """The id at the start of `record`, and where what follows it starts."""
    n = record[0]
    if n:
        return record[1 : 1 + n].decode("utf-8", "surrogatepass"), 1 + n
    value = int.from_bytes(record[1:17], "big")
    return "".join(_B32[(value >> (5 * i)) & 31] for i in range(25, -1, -1)), 17


def pack_record(job_id: str, due_ms: int, envelope: bytes, start_ms: int, level: int) -> bytes:
    """``id (id_bytes), due ms into the leaf (2-4 bytes by level), envelope``."""
    offset = (due_ms - start_ms).to_bytes(_OFFSET_BYTES[level], "big")
    return b"".join((id_bytes(job_id), offset, envelope))


def unpack_record(record: bytes, start_ms: int, level: int) -> FarRecord:
    """A record of the leaf at `start_ms` of `level` read back; ValueError if cut short."""
    size = _OFFSET_BYTES[level]
    if not record or len(record) < (17 if record[0] == 0 else 1 + record[0]) + size:
        raise ValueError(f"a far-tier record of {len(record)} bytes is cut short")
    job_id, at = _id_of(record)
    offset = int.from_bytes(record[at : at + size], "big")
    return FarRecord(job_id, start_ms + offset, record[at + size :])
