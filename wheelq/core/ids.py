"""Job ids: 26 Crockford base32 characters in the ULID layout, 48 bits of ms and 80 random
bits (docs/architecture.md, "Key layout")."""

from __future__ import annotations

import os

# --- ids: 26 Crockford base32 characters (the ULID layout), 48 bits of ms, 80 random bits

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_TIME_BITS = 48
_RANDOM_BYTES = 10
ID_LENGTH = 26
RANDOM_CHARS = 16
"""Characters of an id after its time part (80 random bits)."""

# Two characters per 10 bits: the time part is 5 pairs, the random part 8.
_PAIRS = [a + b for a in _ALPHABET for b in _ALPHABET]
_last_time: tuple[int, str] = (-1, "")
# A byte's low 5 bits as a character: 256 is a multiple of 32, so a uniformly random byte
# gives a uniformly random character.
_CHAR_OF_BYTE = bytes(_ALPHABET.encode("ascii")[b & 31] for b in range(256))


def make_job_id(now_ms: int, entropy: bytes) -> str:
    """A 26-character id from `now_ms` (0 <= now_ms < 2**48) and 10 random bytes."""
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
    """The random parts of `count` ids, `RANDOM_CHARS` each, concatenated (one C pass)."""
    return os.urandom(RANDOM_CHARS * count).translate(_CHAR_OF_BYTE).decode("ascii")


def _encode(value: int, pairs: int) -> str:
    return "".join([_PAIRS[(value >> (10 * i)) & 1023] for i in range(pairs - 1, -1, -1)])


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
