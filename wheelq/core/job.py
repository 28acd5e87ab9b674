"""Jobs at rest and on the wire: envelope, stream entry, the handler's `Job`.

A job's payload is encoded once, by the producer (`wheelq.core.payload`), and travels
as opaque msgpack bytes from then on.

Envelope (the value in ``{T:s}:jobs``), a msgpack array::

    [1, payload: raw, attempt: int, max_attempts: int, enqueued_ms: int]
    [1, payload, attempt, max_attempts, enqueued_ms, group: str, job_id: str]   (a retry)
    [1, payload, attempt, max_attempts, enqueued_ms, group, job_id, traceparent: str]
    [..., traceparent, callback: bytes, key: str, ordered: "1" | ""]

A retry is meant for one consumer group only (the one whose handler
failed), and carries the job id because it may be stored under another
sorted-set member while a job of the same id is pending again. A job enqueued
with a trace context carries its W3C ``traceparent`` (`wheelq.core.trace`) as
field 8, with ``""`` for group and job id when it has neither: the scripts read
``""`` there as absent.

The payload bytes sit in msgpack's raw ``str`` family, not ``bin``: the Lua
``cmsgpack`` built into Redis and Valkey cannot read ``bin``, and the emit
script unpacks envelopes. Readers decode envelopes with ``raw=True``.

A fired job is a ready-stream entry, whose fields `wheelq.core.wire` names;
`Job.from_entry` decodes one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import msgpack

from wheelq.core import wire
from wheelq.core.callback import Callback
from wheelq.core.payload import decode_payload
from wheelq.errors import InvalidArgumentError

ENVELOPE_VERSION = 1
MAX_ATTEMPTS_LIMIT = 1000


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


def pack_envelope(
    payload: bytes,
    attempt: int,
    max_attempts: int,
    enqueued_ms: int,
    packer: msgpack.Packer | None = None,
    group: str = "",
    job_id: str = "",
    traceparent: str | None = None,
    callback: bytes = b"",
    key: str = "",
    ordered: bool = False,
) -> bytes:
    """The envelope ``[1, payload, attempt, max_attempts, enqueued_ms]``, then as far as the
    last one set: ``group, job_id`` (a retry), ``traceparent``, the packed
    `wheelq.core.callback.Callback`, the job's ``key`` and ``"1"`` when its key's jobs run
    in order (``""`` for each one unset before it); `packer`
    (``msgpack.Packer(use_bin_type=False)``) as in `encode_payload`."""
    fields = envelope_fields(
        payload, attempt, max_attempts, enqueued_ms, group, job_id, traceparent, callback, key
    )
    if ordered:
        fields += [""] * (10 - len(fields)) + ["1"]
    if packer is None:
        packed: bytes = msgpack.packb(fields, use_bin_type=False)
        return packed
    return packer.pack(fields)  # type: ignore[no-any-return]


def envelope_fields(
    payload: bytes,
    attempt: int,
    max_attempts: int,
    enqueued_ms: int,
    group: str = "",
    job_id: str = "",
    traceparent: str | None = None,
    callback: bytes = b"",
    key: str = "",
) -> list[Any]:
    """`pack_envelope`'s fields before they are packed (an unordered job's); a batch of
    jobs that differ only in payload packs one such list with each payload in place 1."""
    fields: list[Any] = [ENVELOPE_VERSION, payload, attempt, max_attempts, enqueued_ms]
    if key:
        fields += [group, job_id, traceparent or "", callback, key]
    elif callback:
        fields += [group, job_id, traceparent or "", callback]
    elif traceparent:
        fields += [group, job_id, traceparent]
    elif group or job_id:
        fields += [group, job_id]
    return fields


@dataclass(frozen=True, slots=True)
class Envelope:
    """What is stored for a pending job besides its due time."""

    payload: bytes
    attempt: int = 1
    max_attempts: int = 5
    enqueued_ms: int = 0
    group: str = ""
    """A retry's consumer group ("" = every group)."""
    job_id: str = ""
    """A retry's job id ("" = the sorted-set member is the id)."""
    traceparent: str = ""
    """The W3C traceparent the job was enqueued in ("" = none)."""
    callback: bytes = b""
    """The packed `wheelq.core.callback.Callback` (b"" = none)."""
    key: str = ""
    """The job's key ("" = none): flow control's per-key limits and order."""
    ordered: bool = False
    """The key's jobs run one at a time, in due order."""

    def pack(self) -> bytes:
        return pack_envelope(
            self.payload,
            self.attempt,
            self.max_attempts,
            self.enqueued_ms,
            group=self.group,
            job_id=self.job_id,
            traceparent=self.traceparent,
            callback=self.callback,
            key=self.key,
            ordered=self.ordered,
        )

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
        group, job_id, trace, callback, key, ordered = [*fields[5:11], *[b""] * 6][:6]
        numbers = (attempt, max_attempts, enqueued_ms)
        if (
            not isinstance(payload, bytes)
            or not all(isinstance(n, int) and not isinstance(n, bool) for n in numbers)
            or not all(isinstance(s, bytes) for s in (group, job_id, trace, callback, key, ordered))
        ):
            raise ValueError(f"unknown envelope layout: {fields!r:.80}")
        try:
            texts = group.decode(), job_id.decode(), trace.decode()
            return cls(
                payload,
                attempt,
                max_attempts,
                enqueued_ms,
                *texts,
                callback,
                key.decode(),
                ordered == b"1",
            )
        except UnicodeDecodeError as exc:
            raise ValueError(f"unknown envelope layout: {exc}") from exc


@dataclass(frozen=True, slots=True)
class Job:
    """A fired job, as a handler receives it (and as read back from a ready stream)."""

    id: str
    topic: str
    payload: Any
    due_ms: int
    """When it was due: ms since the epoch on the Redis clock."""
    attempt: int
    """1 on the first run, 2 on the first retry, ..."""
    max_attempts: int
    group: str | None = None
    """The one consumer group this entry is for (retries, replays); None: every group."""
    entry_id: str = ""
    """The stream entry id (``ms-seq``; ms is when it fired, on the Redis clock)."""
    shard: int = 0
    deliveries: int = 1
    """How often this stream entry has been delivered to the group: 1 the first time, N
    after it was taken over from N-1 workers that died or stalled running it. The same
    `attempt` with ``deliveries > 1`` is a re-run of a run whose outcome was never settled."""
    traceparent: str | None = None
    """The W3C traceparent it was enqueued in, as stored (`wheelq.core.trace` parses it);
    None when it was enqueued without one. Retries and replays keep it."""
    callback: Callback | None = None
    """Where `wheelq deliver` POSTs it; None for a job enqueued without one."""
    key: str | None = None
    """The key it was enqueued with (``enqueue(..., key=)``); None without one."""
    ordered: bool = False
    """Enqueued with ``ordered=True``: its key's jobs run one at a time, in due order."""

    @property
    def due(self) -> datetime:
        """`due_ms` as an aware UTC datetime; a stored time no datetime holds (beyond year
        9999, before year 1: written by something else than wheelq) reads as the latest or
        earliest one there is, so a handler never fails on reading it."""
        try:
            return datetime.fromtimestamp(self.due_ms / 1000, tz=UTC)
        except (OverflowError, OSError, ValueError):
            return (datetime.max if self.due_ms > 0 else datetime.min).replace(tzinfo=UTC)

    @property
    def fired_ms(self) -> int:
        """When it entered the stream (ms, Redis clock): the entry id's time part."""
        return entry_ms(self.entry_id)

    @classmethod
    def from_entry(
        cls, entry_id: str, fields: Mapping[bytes, bytes], shard: int = 0, deliveries: int = 1
    ) -> Job:
        """Decode a ready-stream entry (delivered `deliveries` times).

        Raises:
            ValueError: A field is missing or malformed (the entry is dead-lettered).
        """
        try:
            group = fields.get(wire.GROUP)
            trace = fields.get(wire.TRACE)
            callback = fields.get(wire.CALLBACK)
            key = fields.get(wire.KEY)
            return cls(
                id=fields[wire.ID].decode(),
                topic=fields[wire.TOPIC].decode(),
                payload=decode_payload(fields[wire.PAYLOAD]),
                due_ms=int(fields[wire.DUE]),
                attempt=int(fields[wire.ATTEMPT]),
                max_attempts=int(fields.get(wire.MAX_ATTEMPTS, b"1")),
                group=group.decode() if group else None,
                entry_id=entry_id,
                shard=shard,
                deliveries=deliveries,
                # never a reason to dead-letter a job: readers parse it leniently
                traceparent=trace.decode("ascii", "replace") if trace else None,
                callback=Callback.unpack(callback) if callback else None,
                key=key.decode() if key else None,
                ordered=fields.get(wire.ORDERED) == b"1",
            )
        except (KeyError, ValueError, TypeError, UnicodeDecodeError) as exc:
            raise ValueError(f"malformed stream entry: {exc!r}") from exc


def entry_ms(entry_id: str | bytes) -> int:
    """The ms part of a stream entry id (``"1700000000123-0"`` -> 1700000000123)."""
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    return int(text.partition("-")[0])
