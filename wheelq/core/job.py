"""Jobs at rest and on the wire: payload codec, envelope, stream entry.

A job's payload is any msgpack-serialisable value. It is encoded once, by
the producer, and travels as opaque msgpack bytes from then on.

Envelope (the value in ``{T:s}:jobs``), a msgpack array::

    [1, payload: raw, attempt: int, max_attempts: int, enqueued_ms: int]

The payload bytes sit in msgpack's raw ``str`` family, not ``bin``: the Lua
``cmsgpack`` built into Redis and Valkey cannot read ``bin``, and the emit
script unpacks envelopes. Readers decode envelopes with ``raw=True``.

Stream entry (``{T:s}:ready``), flat string fields any language can read::

    id           job id
    topic        topic name
    due          due time, integer ms on the Redis clock
    attempt      1 on the first run
    max_attempts attempts allowed before the job is dead-lettered
    payload      msgpack bytes of the payload

Readers must ignore fields they do not know: more may be added.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import msgpack

from wheelq.errors import InvalidArgumentError, PayloadTooLargeError, PayloadTypeError

ENVELOPE_VERSION = 1
MAX_ATTEMPTS_LIMIT = 1000


def encode_payload(payload: Any, max_bytes: int) -> bytes:
    """Encode `payload` with msgpack and check its size.

    Raises:
        PayloadTypeError: The value (or something inside it) cannot be serialised.
        PayloadTooLargeError: The encoding is longer than `max_bytes`.
    """
    try:
        data: bytes = msgpack.packb(payload, use_bin_type=True, strict_types=False)
    except (TypeError, ValueError, OverflowError) as exc:
        raise PayloadTypeError(
            f"payload must be msgpack-serialisable (None, bool, int, float, str, bytes, "
            f"list, tuple, dict); {exc}"
        ) from exc
    if len(data) > max_bytes:
        raise PayloadTooLargeError(
            "payload",
            f"payload must encode to at most {max_bytes} bytes of msgpack, got {len(data)}",
        )
    return data


def decode_payload(data: bytes) -> Any:
    """Decode payload bytes written by `encode_payload` (or any msgpack writer)."""
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


def validate_max_attempts(max_attempts: object) -> int:
    """Return `max_attempts` if it is an int in [1, 1000].

    Raises:
        InvalidArgumentError: Otherwise.
    """
    if (
        isinstance(max_attempts, bool)
        or not isinstance(max_attempts, int)
        or not 1 <= max_attempts <= MAX_ATTEMPTS_LIMIT
    ):
        raise InvalidArgumentError(
            "max_attempts",
            f"max_attempts must be an int in [1, {MAX_ATTEMPTS_LIMIT}], got {max_attempts!r}",
        )
    return max_attempts


@dataclass(frozen=True, slots=True)
class Envelope:
    """What is stored for a pending job besides its due time."""

    payload: bytes
    attempt: int = 1
    max_attempts: int = 5
    enqueued_ms: int = 0

    def pack(self) -> bytes:
        packed: bytes = msgpack.packb(
            [ENVELOPE_VERSION, self.payload, self.attempt, self.max_attempts, self.enqueued_ms],
            use_bin_type=False,
        )
        return packed

    @classmethod
    def unpack(cls, data: bytes) -> Envelope:
        """Decode an envelope.

        Raises:
            ValueError: `data` is not an envelope of a known version.
        """
        try:
            fields = msgpack.unpackb(data, raw=True)
        except Exception as exc:  # msgpack raises several unrelated types
            raise ValueError(f"not a msgpack envelope: {exc}") from exc
        if not isinstance(fields, list) or len(fields) < 5 or fields[0] != ENVELOPE_VERSION:
            raise ValueError(f"unknown envelope layout: {fields!r:.80}")
        _, payload, attempt, max_attempts, enqueued_ms = fields[:5]
        numbers = (attempt, max_attempts, enqueued_ms)
        if not isinstance(payload, bytes) or not all(
            isinstance(n, int) and not isinstance(n, bool) for n in numbers
        ):
            raise ValueError(f"unknown envelope layout: {fields!r:.80}")
        return cls(payload, attempt, max_attempts, enqueued_ms)


class JobState(StrEnum):
    """Where a job is. Once fired, a job lives in its topic's stream, not in `get()`."""

    PENDING = "pending"


@dataclass(frozen=True, slots=True)
class JobInfo:
    """A pending job as `get()` reports it."""

    id: str
    topic: str
    state: JobState
    due_ms: int
    attempt: int
    max_attempts: int
    enqueued_ms: int
    payload: Any


@dataclass(frozen=True, slots=True)
class StreamJob:
    """A fired job as read back from a ready stream."""

    id: str
    topic: str
    due_ms: int
    attempt: int
    max_attempts: int
    payload: Any

    @classmethod
    def from_fields(cls, fields: Mapping[bytes, bytes]) -> StreamJob:
        """Decode the fields of a stream entry.

        Raises:
            ValueError: A field is missing or malformed.
        """
        try:
            return cls(
                id=fields[b"id"].decode(),
                topic=fields[b"topic"].decode(),
                due_ms=int(fields[b"due"]),
                attempt=int(fields[b"attempt"]),
                max_attempts=int(fields.get(b"max_attempts", b"1")),
                payload=decode_payload(fields[b"payload"]),
            )
        except (KeyError, ValueError, TypeError, UnicodeDecodeError) as exc:
            raise ValueError(f"malformed stream entry: {exc!r}") from exc
