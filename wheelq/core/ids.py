"""Job ids: unique, sortable by creation time, safe in URLs.

26 characters of Crockford base32 (the ULID layout): 48 bits of
milliseconds, then 80 random bits. Ids made in the same millisecond sort
in random order; across milliseconds they sort by time.
"""

from __future__ import annotations

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_TIME_BITS = 48
_RANDOM_BYTES = 10
ID_LENGTH = 26


def make_job_id(now_ms: int, entropy: bytes) -> str:
    """Build a job id from a timestamp and 10 random bytes.

    Args:
        now_ms: Milliseconds since the epoch (0 <= now_ms < 2**48).
        entropy: Exactly 10 random bytes (``secrets.token_bytes(10)``).

    Returns:
        A 26-character id.
    """
    if len(entropy) != _RANDOM_BYTES:
        raise ValueError(f"entropy must be {_RANDOM_BYTES} bytes, got {len(entropy)}")
    value = ((now_ms & ((1 << _TIME_BITS) - 1)) << 80) | int.from_bytes(entropy, "big")
    chars = []
    for _ in range(ID_LENGTH):
        chars.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(chars))


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
