"""Job ids: unique, sortable by creation time, safe in URLs.

26 characters of Crockford base32 (the ULID layout): 48 bits of
milliseconds, then 80 random bits. Ids made in the same millisecond sort
in random order; across milliseconds they sort by time.
"""

from __future__ import annotations

import os

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_TIME_BITS = 48
_RANDOM_BYTES = 10
ID_LENGTH = 26


# Two characters per 10 bits. The 130-bit id is 13 such pairs: 5 for the time (2 zero bits and
# 48 bits of ms) and 8 for the 80 random bits. The time part is the same for every id made in
# one millisecond, so the last one is kept.
_PAIRS = [a + b for a in _ALPHABET for b in _ALPHABET]
_last_time: tuple[int, str] = (-1, "")

# A random byte's low 5 bits as a character: 256 is a multiple of 32, so a uniformly random
# byte gives a uniformly random character, and 16 of them 80 uniformly random bits.
_CHAR_OF_BYTE = bytes(_ALPHABET.encode("ascii")[b & 31] for b in range(256))
RANDOM_CHARS = 16
"""Characters of an id after its time part (80 random bits)."""


def make_job_id(now_ms: int, entropy: bytes) -> str:
    """Build a job id from a timestamp and 10 random bytes (the layout's definition;
    clients draw many ids at once with `time_part` and `random_parts`).

    Args:
        now_ms: Milliseconds since the epoch (0 <= now_ms < 2**48).
        entropy: Exactly 10 random bytes (``secrets.token_bytes(10)``).

    Returns:
        A 26-character id.
    """
    if len(entropy) != _RANDOM_BYTES:
        raise ValueError(f"entropy must be {_RANDOM_BYTES} bytes, got {len(entropy)}")
    return time_part(now_ms) + _encode(int.from_bytes(entropy, "big"), 8)


def time_part(now_ms: int) -> str:
    """The first 10 characters of the ids made at `now_ms` (0 <= now_ms < 2**48)."""
    global _last_time  # noqa: PLW0603 (a one-entry cache)
    cached_ms, head = _last_time
    if cached_ms != now_ms:
        head = _encode(now_ms & ((1 << _TIME_BITS) - 1), 5)
        _last_time = (now_ms, head)
    return head


def random_parts(count: int) -> str:
    """The random parts of `count` ids, `RANDOM_CHARS` characters each, one after the other:
    each id's time part followed by one of them is an id as `make_job_id` makes it from
    uniformly random entropy (one C pass for all: a fifth of the cost per id of encoding
    each id's 10 bytes in Python)."""
    return os.urandom(RANDOM_CHARS * count).translate(_CHAR_OF_BYTE).decode("ascii")


def _encode(value: int, pairs: int) -> str:
    out = [_PAIRS[(value >> (10 * i)) & 1023] for i in range(pairs - 1, -1, -1)]
    return "".join(out)


def job_id_time_ms(job_id: str) -> int | None:
    """The creation time of a generated id, or None if `job_id` is not one."""
    if len(job_id) != ID_LENGTH:
        return None
    value = 0
    for ch in job_id:
        digit = _ALPHABET.find(ch)
        if digit < 0:
            return None
        value = value * 32 + digit
    if value >> 128:
        return None  # 26 characters hold 130 bits; an id uses 128
    return value >> 80
