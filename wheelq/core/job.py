"""A job on the wire: id, payload, trace context, envelope, stream entry and dead letter
(formats: docs/architecture.md, "Key layout"; the scripts write them in ``_lib.lua``).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar, cast

import msgpack

from wheelq.core.callback import Callback
from wheelq.errors import (
    InvalidArgumentError,
    PayloadTooDeepError,
    PayloadTooLargeError,
    PayloadTypeError,
    ResultError,
    ResultTooLargeError,
    ResultTypeError,
    int_in,
)

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


# --- payload: msgpack, encoded once by the producer and carried as opaque bytes


class _NotPlain(Exception):
    """The value needs the careful path."""


def _not_plain(value: Any) -> Any:
    raise _NotPlain


def payload_packer() -> msgpack.Packer:
    """A packer for `encode_payload`'s fast path: exact plain types only (not tuples)."""
    return msgpack.Packer(use_bin_type=True, strict_types=True, default=_not_plain)


def encode_payload(payload: Any, max_bytes: int, packer: msgpack.Packer | None = None) -> bytes:
    """Encode `payload` (PayloadTypeError, PayloadTooLargeError); plain types in one pass."""
    try:
        if packer is None:
            data: bytes = msgpack.packb(
                payload, use_bin_type=True, strict_types=True, default=_not_plain
            )
        else:
            data = packer.pack(payload)
    except _NotPlain:
        data = _encode_careful(payload)
    except (TypeError, ValueError, OverflowError) as exc:
        raise _type_error(exc, payload) from exc
    if len(data) > max_bytes:
        raise PayloadTooLargeError(
            "payload",
            f"payload must encode to at most {max_bytes} bytes of msgpack, got {len(data)}",
        )
    if len(data) > MAX_PAYLOAD_DEPTH and isinstance(payload, _NESTED):  # else: no need
        check_depth(payload, data)
    return data


MAX_PAYLOAD_DEPTH = 100
"""Most levels of lists and maps a payload may nest (``1`` has none, ``[[1]]`` two): deep
enough for any document, shallow enough that every reader renders it without recursion
limits, and with room for the answer around it under the 128 levels JSON parsers such as
serde_json accept. A stored payload nested deeper (written by an older version, or straight
into Redis) is rendered with its remainder as ``{"$truncated": ...}`` (`jsonable`)."""

# A list or map starts with one of these bytes in msgpack (fixmap, fixarray, array 16/32,
# map 16/32): a stored payload with fewer of them than the limit cannot nest deeper than it,
# and need not be decoded to tell. Counted in one C pass: marked and counted (faster for
# short payloads), or the others deleted.
_CONTAINER_BYTES = frozenset([*range(0x80, 0xA0), 0xDC, 0xDD, 0xDE, 0xDF])
_MARKED = bytes(b in _CONTAINER_BYTES for b in range(256))
_NOT_CONTAINER_BYTES = bytes(b for b in range(256) if b not in _CONTAINER_BYTES)
_SHORT = 2048


def check_depth(payload: Any, data: bytes) -> None:
    """`PayloadTooDeepError` if `payload` (encoded as `data`) nests deeper than
    `MAX_PAYLOAD_DEPTH`: free for a short one (each level takes a byte), else a walk of its
    lists and maps (not of its bytes: a large string costs nothing)."""
    if len(data) > MAX_PAYLOAD_DEPTH and _deeper_than(payload, MAX_PAYLOAD_DEPTH):
        raise _too_deep()


def stored_too_deep(data: bytes) -> bool:
    """Whether a stored payload nests deeper than `MAX_PAYLOAD_DEPTH` (one that does not
    decode at all is not: it is malformed, which its readers handle)."""
    if not _may_be_deep(data):
        return False
    try:
        return _deeper_than(decode_payload(data), MAX_PAYLOAD_DEPTH)
    except msgpack.StackError:  # past msgpack's own 1,024 levels
        return True
    except Exception:  # msgpack raises several unrelated types
        return False


def _may_be_deep(data: bytes) -> bool:
    """False when `data` has too few list and map headers to nest past the limit."""
    if len(data) <= MAX_PAYLOAD_DEPTH:
        return False
    if len(data) < _SHORT:
        return data.translate(_MARKED).count(1) > MAX_PAYLOAD_DEPTH
    return len(data.translate(None, _NOT_CONTAINER_BYTES)) > MAX_PAYLOAD_DEPTH


def _too_deep() -> PayloadTooDeepError:
    return PayloadTooDeepError(
        "payload",
        f"payload must nest lists and maps at most {MAX_PAYLOAD_DEPTH} levels deep, "
        f"got {MAX_PAYLOAD_DEPTH + 1} or more",
    )


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether `value` nests lists, tuples and dicts deeper than `limit` (no recursion)."""
    if not isinstance(value, _NESTED):
        return False
    todo = [(value, 1)]
    pop, push = todo.pop, todo.append
    while todo:
        item, depth = pop()
        if depth > limit:
            return True
        # dict keys that decode back are never lists or maps
        for v in item.values() if isinstance(item, dict) else item:
            if isinstance(v, _NESTED):
                push((v, depth + 1))
    return False


_NESTED = (dict, list, tuple)


def _encode_careful(payload: Any) -> bytes:
    try:
        data: bytes = msgpack.packb(payload, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise _type_error(exc, payload) from exc
    try:
        decode_payload(data)
    except Exception as exc:  # msgpack raises several unrelated types
        raise PayloadTypeError(
            "payload must decode back from msgpack: dict keys must be None, bool, int, "
            f"float, str or bytes, not a tuple (it decodes as an unhashable list); {exc}"
        ) from exc
    return data


def _type_error(exc: Exception, payload: Any) -> PayloadTypeError | PayloadTooDeepError:
    if _deeper_than(payload, MAX_PAYLOAD_DEPTH):  # msgpack's own limit is 511 levels
        return _too_deep()
    return PayloadTypeError(
        f"payload must be msgpack-serialisable (None, bool, int, float, str, bytes, "
        f"list, tuple, dict); {exc}"
    )


def encode_result(result: Any, max_bytes: int) -> bytes:
    """A handler's return value as its job keeps it: msgpack, as a payload is encoded.

    Raises:
        ResultTooLargeError: It encodes to more than `max_bytes` (``result_max_bytes``).
        ResultTypeError: msgpack cannot serialise it, or it would not decode back.
    """
    try:
        return encode_payload(result, max_bytes)
    except PayloadTooLargeError:
        size = len(msgpack.packb(result, use_bin_type=True))
        raise ResultTooLargeError(
            f"the handler's result must encode to at most result_max_bytes={max_bytes} bytes "
            f"of msgpack (a worker setting, 0-{MAX_RESULT_BYTES}; 0 keeps no result), got {size}"
        ) from None
    except PayloadTypeError as exc:
        raise ResultTypeError(f"the handler's result (its return value): {exc}") from None
    except PayloadTooDeepError as exc:
        raise ResultError(f"the handler's result (its return value): {exc}") from None


MAX_RESULT_BYTES = 16 * 1024 * 1024
"""The largest `result_max_bytes` a worker accepts."""


def decode_payload(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


def read_payload(data: bytes) -> Any:
    """A stored payload as its readers show it (a job's state, a dead letter, a schedule):
    `decode_payload`, but one nested past msgpack's own 1,024 levels (by an older version, or
    straight into Redis) is read one level past `MAX_PAYLOAD_DEPTH`, the lists and maps
    there empty, so `jsonable` renders it as it renders any payload that deep. Raises as
    `decode_payload` for anything else that does not decode."""
    try:
        return decode_payload(data)
    except msgpack.StackError:
        return _read_shallow(data, MAX_PAYLOAD_DEPTH)


_ARRAYS = frozenset([*range(0x90, 0xA0), 0xDC, 0xDD])
_MAPS = frozenset([*range(0x80, 0x90), 0xDE, 0xDF])


def _read_shallow(data: bytes, levels: int) -> Any:
    """`data` decoded without recursion: its lists and maps to `levels` levels, those one
    level deeper empty (their items skipped)."""
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False, max_buffer_size=len(data))
    unpacker.feed(data)
    top: list[Any] = []
    # each open list or map: [it, items left to read (a map's keys and values), key read]
    todo: list[list[Any]] = [[top, 1, None]]
    while todo:
        frame = todo[-1]
        if not frame[1]:
            todo.pop()
            continue
        frame[1] -= 1
        first = data[unpacker.tell()]
        value: Any
        if first in _ARRAYS or first in _MAPS:
            value, n = (
                ([], unpacker.read_array_header())
                if first in _ARRAYS
                else ({}, 2 * unpacker.read_map_header())
            )
            if len(todo) <= levels:
                todo.append([value, n, None])
            else:
                _skip(unpacker, data, n)
        else:
            value = unpacker.unpack()
        into = frame[0]
        if isinstance(into, list):
            into.append(value)
        elif frame[1] % 2:  # a key: its value follows
            frame[2] = value
        else:
            into[frame[2]] = value
    if unpacker.tell() != len(data):
        raise ValueError(f"{len(data) - unpacker.tell()} bytes past the payload")
    return top[0]


def _skip(unpacker: msgpack.Unpacker, data: bytes, items: int) -> None:
    """Skip `items` msgpack objects, however deep, without recursion."""
    while items:
        items -= 1
        first = data[unpacker.tell()]
        if first in _ARRAYS:
            items += unpacker.read_array_header()
        elif first in _MAPS:
            items += 2 * unpacker.read_map_header()
        else:
            unpacker.skip()


# --- trace context: a W3C traceparent, version 00 (tracestate is not carried)

_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_ZERO_TRACE = "0" * 32
_ZERO_SPAN = "0" * 16
SAMPLED = 0x01
"""The trace-flags bit saying the caller may have recorded its span."""


def validate_traceparent(traceparent: object) -> str | None:
    """`traceparent` if it is None or a valid version-00 traceparent, else InvalidArgumentError."""
    if traceparent is None:
        return None
    if isinstance(traceparent, str) and parse_traceparent(traceparent) is not None:
        return traceparent
    raise InvalidArgumentError(
        "traceparent",
        "traceparent must be a W3C traceparent '00-<trace id: 32 hex>-<span id: 16 hex>-"
        f"<flags: 2 hex>' in lower case, ids not all zero, or None; got {traceparent!r:.80}",
    )


def parse_traceparent(traceparent: str | None) -> tuple[int, int, int] | None:
    """``(trace id, span id, flags)`` of a valid traceparent, else None; never raises."""
    if not traceparent:
        return None
    match = _TRACEPARENT.fullmatch(traceparent)
    if match is None:
        return None
    trace_id, span_id, flags = match.groups()
    if trace_id == _ZERO_TRACE or span_id == _ZERO_SPAN:
        return None
    return int(trace_id, 16), int(span_id, 16), int(flags, 16)


def format_traceparent(trace_id: int, span_id: int, flags: int) -> str:
    """The version-00 traceparent of a span context (ids as ints, as OpenTelemetry has them)."""
    return f"00-{trace_id:032x}-{span_id:016x}-{flags & 0xFF:02x}"


# --- stream entries and notes


class Field:
    """Field names of a ready-stream entry and a dead letter (readers ignore unknown ones)."""

    ID = b"id"
    TOPIC = b"topic"
    DUE = b"due"
    ATTEMPT = b"attempt"
    MAX_ATTEMPTS = b"max_attempts"
    PAYLOAD = b"payload"
    ENQUEUED = b"enqueued"
    GROUP = b"group"
    TRACE = b"trace"
    CALLBACK = b"callback"
    KEY = b"key"
    ORDERED = b"ordered"
    REASON = b"reason"
    ERROR = b"error"
    ENTRY = b"entry"
    ENVELOPE = b"envelope"

    READY: ClassVar[tuple[bytes, ...]]
    """Every ready-stream entry's fields, in order (`READY_ENTRY`'s written always); then,
    when set, the optional ones."""
    DEAD = (REASON, ERROR, GROUP, ENTRY)
    """What a dead letter adds after the ready-stream entry's fields, in order."""


@dataclass(frozen=True, slots=True)
class EntryField:
    """One field of a ready-stream entry: a row of `READY_ENTRY`."""

    name: bytes
    source: str
    """What it is fired from: an `Envelope` attribute, or the fire's own ``"id"`` (the
    envelope's `job_id` when set, else the job's member), ``"topic"`` or ``"due"``."""
    kind: str
    """How its value is spelled: ``"int"`` (decimal), ``"text"`` (UTF-8), ``"trace"`` (ASCII,
    read leniently: never a reason to dead-letter a job), ``"payload"`` (msgpack),
    ``"callback"`` (a packed `Callback`) or ``"flag"`` (``"1"`` when true)."""
    job: str | None
    """The `Job` attribute `Job.from_entry` fills with it; None: not read into a `Job`."""
    optional: bool = False
    """Written only when set (not ""/b""/False), after every field written always; a reader
    takes it as absent (None, False) when it is not there or empty."""
    default: bytes | None = None
    """What a reader takes for a field written always that an entry lacks (an older version
    wrote it); None: the entry is malformed without it."""
    requires: str | None = None
    """An optional field written only when this `source` is set too."""


READY_ENTRY = (
    EntryField(Field.ID, "id", "text", "id"),
    EntryField(Field.TOPIC, "topic", "text", "topic"),
    EntryField(Field.DUE, "due", "int", "due_ms"),
    EntryField(Field.ATTEMPT, "attempt", "int", "attempt"),
    EntryField(Field.MAX_ATTEMPTS, "max_attempts", "int", "max_attempts", default=b"1"),
    EntryField(Field.PAYLOAD, "payload", "payload", "payload"),
    # the envelope's enqueued_ms, so a lookup still has it once the job fired (core.history)
    EntryField(Field.ENQUEUED, "enqueued_ms", "int", None, default=b"0"),
    EntryField(Field.GROUP, "group", "text", "group", optional=True),
    EntryField(Field.TRACE, "traceparent", "trace", "traceparent", optional=True),
    EntryField(Field.CALLBACK, "callback", "callback", "callback", optional=True),
    EntryField(Field.KEY, "key", "text", "key", optional=True),
    EntryField(Field.ORDERED, "ordered", "flag", "ordered", optional=True, requires="key"),
)
"""A ready-stream entry, field by field in the order written: the one definition of it
(docs/architecture.md, "Key layout"). `wq_fire_entry` in ``store/lua/_lib.lua`` writes it
(tests/unit/test_wire.py holds the script to this table), `Job.from_entry` reads it (its
decoder is generated from this table), and tests build entries from it
(tests/support/entries.py). A new field is a row here, its `Job` attribute, and its place in
``wq_fire_entry``."""

Field.READY = tuple(f.name for f in READY_ENTRY if not f.optional)


def parse_notes(message: bytes) -> list[tuple[str, int]]:
    """A wake message's notes (a line each), in order; lines that are not notes left out."""
    return [note for line in message.split(b"\n") if (note := parse_note(line)) is not None]


def parse_note(note: bytes) -> tuple[str, int] | None:
    """``b"<due ms>:<job id>"`` (an inbox or wake note) as ``(job id, due ms)``, else None."""
    try:
        due, _, job_id = note.decode().partition(":")
    except UnicodeDecodeError:
        return None
    if not (due.isascii() and due.isdigit()) or not job_id:
        return None
    return job_id, int(due)


def entry_ms(entry_id: str | bytes) -> int:
    """The ms part of a stream entry id (``"1700000000123-0"`` -> 1700000000123)."""
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    return int(text.partition("-")[0])


# --- the envelope: the value in {T:s}:jobs, a msgpack array (payload bytes in the str
# family: the servers' cmsgpack cannot read bin; readers decode with raw=True)

ENVELOPE_VERSION = 1
MAX_ATTEMPTS_LIMIT = 1000


def validate_max_attempts(max_attempts: object) -> int:
    """`max_attempts` if it is an int in [1, 1000], else InvalidArgumentError."""
    return int_in("max_attempts", max_attempts, 1, MAX_ATTEMPTS_LIMIT)


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
    """The envelope, optional fields up to the last one set; `packer` is reused."""
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
    """`pack_envelope`'s fields of an unordered job, before they are packed."""
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
    """What is stored for a pending job besides its due time ("" / b"": unset)."""

    payload: bytes
    attempt: int = 1
    max_attempts: int = 5
    enqueued_ms: int = 0
    group: str = ""
    """A retry's consumer group ("" = every group)."""
    job_id: str = ""
    """A retry's job id ("" = the sorted-set member is the id)."""
    traceparent: str = ""
    callback: bytes = b""
    """The packed `Callback`."""
    key: str = ""
    ordered: bool = False

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
        """Decode an envelope; ValueError if it is not one of a known version."""
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
    """Deliveries of this entry to the group: N after N-1 workers died or stalled on it."""
    traceparent: str | None = None
    """The W3C traceparent it was enqueued in, as stored; None without one."""
    callback: Callback | None = None
    """Where `wheelq deliver` POSTs it; None without one."""
    key: str | None = None
    """The key it was enqueued with (``enqueue(..., key=)``); None without one."""
    ordered: bool = False
    """Enqueued with ``ordered=True``: its key's jobs run one at a time, in due order."""

    @property
    def due(self) -> datetime:
        """`due_ms` as an aware UTC datetime (clamped to what a datetime holds)."""
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
        """Decode a ready-stream entry (`READY_ENTRY`); ValueError if malformed (it is
        dead-lettered)."""
        try:
            return _read_entry(fields, entry_id, shard, deliveries)
        except (KeyError, ValueError, TypeError, UnicodeDecodeError) as exc:
            raise ValueError(f"malformed stream entry: {exc!r}") from exc


_JobDraft = dataclasses.make_dataclass(
    "_JobDraft", [f.name for f in dataclasses.fields(Job)], slots=True
)
"""A mutable twin of `Job` with the same slots: what `Job.from_entry` fills."""


def _built(**values: Any) -> Job:
    """`Job(**values)` at a quarter of the cost, for the worker's one `Job` per entry.

    A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``
    (1.1 µs of a no-op worker's ~12 µs a job, docs/architecture.md, "Fast paths"); the twin
    sets its slots directly, then becomes a `Job` (``__class__`` assignment between classes
    of the same slots). Every field must be given; tests/unit/test_job.py checks that both
    build equal jobs.
    """
    draft: Any = _JobDraft(**values)
    draft.__class__ = Job
    return cast(Job, draft)


_READ = {
    "int": "int({})",
    "text": "{}.decode()",
    "trace": '{}.decode("ascii", "replace")',
    "payload": "decode_payload({})",
    "callback": "Callback.unpack({})",
    "flag": '{} == b"1"',
}
"""How `Job.from_entry` reads a field of each `EntryField.kind`: an expression of its bytes."""


def entry_reader_source() -> str:
    """The source of `Job.from_entry`'s decoder, written from `READY_ENTRY`: an optional
    field absent or empty is None (a flag False), a field with a default takes it when
    absent, any other must be there."""
    lines, args = [], []
    for f in READY_ENTRY:
        if f.job is None:
            continue
        read = _READ[f.kind]
        if f.kind == "flag":
            value = read.format(f"fields.get({f.name!r})")
        elif f.optional:
            lines.append(f"    {f.job} = fields.get({f.name!r})")
            value = f"{read.format(f.job)} if {f.job} else None"
        elif f.default is not None:
            value = read.format(f"fields.get({f.name!r}, {f.default!r})")
        else:
            value = read.format(f"fields[{f.name!r}]")
        args.append(f"        {f.job}={value},")
    return "\n".join(
        [
            "def read_entry(fields, entry_id, shard, deliveries):",
            *lines,
            "    return _built(",
            *args,
            "        entry_id=entry_id,",
            "        shard=shard,",
            "        deliveries=deliveries,",
            "    )",
        ]
    )


def _entry_reader() -> Callable[[Mapping[bytes, bytes], str, int, int], Job]:
    """`entry_reader_source` compiled once, as `dataclasses` writes a class's ``__init__``:
    the code one would spell by hand, at its speed (a loop over the table's rows would cost
    the worker's one decode per job a call per field)."""
    scope: dict[str, Any] = {"_built": _built, "decode_payload": decode_payload}
    scope["Callback"] = Callback
    exec(entry_reader_source(), scope)  # noqa: S102 (our own table's text, at import)
    return cast(Callable[[Mapping[bytes, bytes], str, int, int], Job], scope["read_entry"])


_read_entry = _entry_reader()


# --- dead letters: {T:s}:dead, kept until replayed or purged


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One entry of a topic's dead-letter streams."""

    ref: str
    """``"shard/entry-id"``: what `replay` and `purge_dead` take."""
    topic: str
    job_id: str | None
    """None when the entry was too malformed to name its job."""
    payload: Any
    """The decoded payload; the raw bytes (or None) when it cannot be decoded."""
    attempt: int | None
    max_attempts: int | None
    reason: str
    error: str
    group: str
    source_entry: str
    dead_ms: int
    """When it was dead-lettered (ms, Redis clock)."""
    fields: dict[str, bytes]
    """Every field as stored, for entries written by someone else."""

    @property
    def shard(self) -> int:
        return parse_ref(self.ref)[0]

    @property
    def entry_id(self) -> str:
        return parse_ref(self.ref)[1]

    @classmethod
    def from_entry(
        cls, topic: str, shard: int, entry_id: str, raw: Mapping[bytes, bytes]
    ) -> DeadLetter:
        fields = {k.decode("utf-8", "replace"): v for k, v in raw.items()}

        def text(name: bytes) -> str | None:
            value = raw.get(name)
            return None if value is None else value.decode("utf-8", "replace")

        def number(name: bytes) -> int | None:
            try:
                return int(raw[name])
            except (KeyError, ValueError):
                return None

        payload: Any = raw.get(Field.PAYLOAD)
        if payload is not None:
            with contextlib.suppress(Exception):  # a foreign payload stays raw bytes
                payload = read_payload(payload)
        return cls(
            ref=f"{shard}/{entry_id}",
            topic=topic,
            job_id=text(Field.ID),
            payload=payload,
            attempt=number(Field.ATTEMPT),
            max_attempts=number(Field.MAX_ATTEMPTS),
            reason=text(Field.REASON) or "",
            error=text(Field.ERROR) or "",
            group=text(Field.GROUP) or "",
            source_entry=text(Field.ENTRY) or "",
            dead_ms=entry_ms(entry_id),
            fields=fields,
        )


_REF = re.compile(r"(\d{1,4})/(\d{1,20})-(\d{1,20})", re.ASCII)
MAX_ID_PART = 2**64 - 1


def parse_ref(ref: object) -> tuple[int, str]:
    """Split a dead-letter ref ``"shard/ms-seq"``, else InvalidArgumentError."""
    match = _REF.fullmatch(ref) if isinstance(ref, str) else None
    if match is None or max(int(match[2]), int(match[3])) > MAX_ID_PART:
        raise InvalidArgumentError(
            "refs",
            f"a dead-letter ref must be 'shard/ms-seq' like '2/1700000000123-0', got {ref!r}",
        )
    return int(match[1]), f"{int(match[2])}-{int(match[3])}"


def jsonable(value: Any, *, exact: bool = False) -> Any:
    """A decoded payload as plain JSON types, one spelling for the CLI, the HTTP service and
    callback bodies: bytes (anywhere inside) become ``{"$bytes": "<base64>"}``, a non-finite
    float ``{"$float": "nan"}``, a map key that is not a string its JSON text, anything else
    ``{"$repr": "..."}``; a payload enqueued as JSON comes back as it went in.

    A list or map nested past `MAX_PAYLOAD_DEPTH` levels (only a payload stored by an older
    version or written straight into Redis has one) becomes ``{"$truncated": "<what>"}``,
    or, with `exact` (a pull, whose consumer must get the payload as it is), a ValueError;
    so no payload renders more than one level past the limit, and none recurses past it.
    """
    return _jsonable(value, MAX_PAYLOAD_DEPTH, exact)


def _jsonable(value: Any, left: int, exact: bool) -> Any:
    if isinstance(value, str | int | bool) or value is None:
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"$float": repr(value)}
    if isinstance(value, bytes | bytearray):
        return {"$bytes": base64.b64encode(value).decode("ascii")}
    if isinstance(value, dict | list | tuple):
        if left == 0:
            what = "a map" if isinstance(value, dict) else "a list"
            if exact:
                raise ValueError(
                    f"payload nests deeper than {MAX_PAYLOAD_DEPTH} levels: {what} at that depth"
                )
            return {"$truncated": f"{what} nested deeper than {MAX_PAYLOAD_DEPTH} levels"}
        left -= 1
        if isinstance(value, dict):
            return {
                k if isinstance(k, str) else json.dumps(_jsonable(k, left, exact)): _jsonable(
                    v, left, exact
                )
                for k, v in value.items()
            }
        return [_jsonable(v, left, exact) for v in value]
    return {"$repr": repr(value)}
