"""A job on the wire: the envelope, the ready-stream entry (`READY_ENTRY`) and its notes,
`Job` and `DeadLetter` (formats: docs/architecture.md, "Key layout"; the scripts write them
in ``store/lua/includes/envelope.lua``). Ids, payloads and trace context have their own
modules beside this one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from operator import call
from typing import TYPE_CHECKING, Any, ClassVar, cast

import msgpack

from wheelq.core.callback import Callback
from wheelq.core.options import KINDS, STORED, same, stored_attributes, stored_unset
from wheelq.core.payload import decode_payload, read_payload
from wheelq.errors import InvalidArgumentError

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
    EXPIRES = b"expires"
    PRIORITY = b"priority"
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
    ``"callback"`` (a packed `Callback`), ``"flag"`` (``"1"`` when true), ``"time"``
    (decimal epoch ms) or ``"priority"`` (one decimal digit; absent: 5)."""
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
    EntryField(Field.ENQUEUED, "enqueued_ms", "int", "enqueued_ms", default=b"0"),
    EntryField(Field.GROUP, "group", "text", "group", optional=True),
    # then each stored option (core.options.STORED), from its envelope slot
    *(
        EntryField(o.entry, o.name, o.kind, o.name, optional=True, requires=o.requires)
        for o in STORED
        if o.entry is not None and o.kind is not None
    ),
)
"""A ready-stream entry, field by field in the order written: the one definition of it
(docs/architecture.md, "Key layout"). `wq_fire_entry` in
``store/lua/includes/envelope.lua`` writes it (tests/unit/test_wire.py holds the script to
this table), `Job.from_entry` reads it (its decoder is generated from this table), and tests
build entries from it (tests/support/entries.py). A new field is a row here (a new option: a row of
`core.options.OPTIONS`), its `Job` attribute, and its place in ``wq_fire_entry``."""

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


def entry_order(entry_id: str) -> tuple[int, int]:
    """A stream entry id as (ms, seq): the order Redis keeps entries in."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def entry_ms(entry_id: str | bytes) -> int:
    """The ms part of a stream entry id (``"1700000000123-0"`` -> 1700000000123)."""
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    return int(text.partition("-")[0])


# --- the envelope: the value in {T:s}:jobs, a msgpack array (payload bytes in the str
# family: the servers' cmsgpack cannot read bin; readers decode with raw=True)

ENVELOPE_VERSION = 1


def pack_envelope(
    payload: bytes,
    attempt: int,
    max_attempts: int,
    enqueued_ms: int,
    packer: msgpack.Packer | None = None,
    group: str = "",
    job_id: str = "",
    **options: Any,
) -> bytes:
    """The envelope; `options` are stored options' `Envelope` values by name (None: unset);
    `packer` is reused."""
    values = list(_UNSET)
    for name, value in options.items():
        values[_AT[name]] = _UNSET[_AT[name]] if value is None else value
    fields = envelope_fields(payload, attempt, max_attempts, enqueued_ms, group, job_id, values)
    if packer is None:
        packed: bytes = msgpack.packb(fields, use_bin_type=False)
        return packed
    return packer.pack(fields)  # type: ignore[no-any-return]


_UNSET = stored_unset()
_AT = {o.name: i for i, o in enumerate(STORED)}


def envelope_fields_source() -> str:
    """The source of `envelope_fields`, written from `core.options.STORED` (as
    `Job.from_entry`'s decoder is from `READY_ENTRY`): the set option (not its `Kind.unset`)
    furthest on decides how many slots follow the head, each spelled by its `Kind.slot` (in
    line where that is the value itself); with none set, group and job_id when either is."""
    values = [f"v{i}" for i in range(len(STORED))]
    spelled = [
        v if slot is same else f"slot_{i}({v})"
        for i, (v, slot) in enumerate(zip(values, _SLOT_OF, strict=True))
    ]
    head = "[version, payload, attempt, max_attempts, enqueued_ms"
    lines = [
        "def envelope_fields(",
        '    payload, attempt, max_attempts, enqueued_ms, group="", job_id="", options=()',
        "):",
        "    if options:",
        f"        {', '.join(values)}, = options",
    ]
    for last in reversed(range(len(STORED))):
        unset = _UNSET[last]  # a falsy one is tested by truth (a priority's 5 by value)
        lines.append(
            f"        if {values[last]}:"
            if not unset
            else f"        if {values[last]} != {unset!r}:"
        )
        lines.append(f"            return {head}, group, job_id, {', '.join(spelled[: last + 1])}]")
    lines.append("    if group or job_id:")
    lines.append(f"        return {head}, group, job_id]")
    lines.append(f"    return {head}]")
    return "\n".join(lines)


_SLOT_OF = tuple(KINDS[o.kind].slot for o in STORED if o.kind is not None)


def _envelope_fields() -> Callable[..., list[Any]]:
    """`envelope_fields_source` compiled once, at import (a loop over the slots, and the lists
    joined after it, would cost each envelope more than its packing)."""
    scope: dict[str, Any] = {"version": ENVELOPE_VERSION}
    scope.update({f"slot_{i}": slot for i, slot in enumerate(_SLOT_OF)})
    exec(envelope_fields_source(), scope)  # noqa: S102 (our own table's text, at import)
    fields = scope["envelope_fields"]
    fields.__doc__ = _FIELDS_DOC
    return cast(Callable[..., list[Any]], fields)


_FIELDS_DOC = """`pack_envelope`'s fields, before they are packed: slots up to the last one set
(`options`: the stored options' `Envelope` values, `core.options.STORED` order)."""

if TYPE_CHECKING:

    def envelope_fields(
        payload: bytes,
        attempt: int,
        max_attempts: int,
        enqueued_ms: int,
        group: str = "",
        job_id: str = "",
        options: tuple[Any, ...] | list[Any] = (),
    ) -> list[Any]: ...

else:
    envelope_fields = _envelope_fields()


_READS = tuple(KINDS[o.kind].read for o in STORED if o.kind is not None)
_SLOTS = 2 + len(_READS)
"""The slots after the head this version reads: group, job_id, then each stored option."""
_options_of = stored_attributes()


@dataclass(frozen=True, slots=True)
class Envelope:
    """What is stored for a pending job besides its due time ("" / b"": unset): its head,
    then each stored option (`core.options.STORED`, in the order of its slots)."""

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
    expires: int = 0
    """Until when it may start: epoch ms (0: no expiry)."""
    priority: int = 5
    """0-9, higher first (5: none given; its slot is then ``""``)."""

    @property
    def options(self) -> tuple[Any, ...]:
        """The stored options' values, `core.options.STORED` order."""
        return _options_of(self)

    def pack(self) -> bytes:
        fields = envelope_fields(
            self.payload,
            self.attempt,
            self.max_attempts,
            self.enqueued_ms,
            self.group,
            self.job_id,
            _options_of(self),
        )
        packed: bytes = msgpack.packb(fields, use_bin_type=False)
        return packed

    @classmethod
    def unpack(cls, data: bytes) -> Envelope:
        """Decode an envelope; ValueError if it is not one of a known version."""
        try:
            fields = msgpack.unpackb(data, raw=True)
        except Exception as exc:  # msgpack raises several unrelated types
            raise ValueError(f"not a msgpack envelope: {exc}") from exc
        if not isinstance(fields, list) or len(fields) < 5 or fields[0] != ENVELOPE_VERSION:
            raise ValueError(f"unknown envelope layout: {fields!r:.80}")
        _, payload, attempt, max_attempts, enqueued_ms, *rest = fields
        del rest[_SLOTS:]  # slots past the ones this version knows (a newer writer's)
        # msgpack reads an int as int and a bool as bool: `type(n) is int` is no bool
        if (
            not isinstance(payload, bytes)
            or type(attempt) is not int
            or type(max_attempts) is not int
            or type(enqueued_ms) is not int
            or (rest and {*map(type, rest)} != {bytes})
        ):
            raise ValueError(f"unknown envelope layout: {fields!r:.80}")
        if not rest:  # slots not written are unset: the fields' defaults (`STORED`' unset)
            return cls(payload, attempt, max_attempts, enqueued_ms)
        group, job_id, *slots = rest if len(rest) > 1 else [*rest, b""]
        try:
            options = map(call, _READS, slots)  # those not written: the fields' defaults
            return cls(
                payload,
                attempt,
                max_attempts,
                enqueued_ms,
                group.decode(),
                job_id.decode(),
                *options,
            )
        except (UnicodeDecodeError, ValueError) as exc:
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
    enqueued_ms: int = 0
    """When this attempt was enqueued (ms since the epoch): the first by the enqueue call
    (the producer's clock), a retry when the attempt before it ended (the worker's); 0
    when unknown (an entry without the field, written by another client)."""

    expires: int | None = None
    """Until when it may start (``enqueue(..., expires=)``): epoch ms, Redis clock; None
    without one. A job read after it is dropped as expired, never run."""
    priority: int = 5
    """Its priority (``enqueue(..., priority=)``): 0-9, higher first; 5 without one."""

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


def _built(*values: Any) -> Job:
    """`Job(*values)` (every field, in order) at a quarter of the cost, for the worker's one
    `Job` per entry.

    A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``
    (1.1 µs of a no-op worker's ~12 µs a job, docs/architecture.md, "Fast paths"); the twin
    sets its slots directly, then becomes a `Job` (``__class__`` assignment between classes
    of the same slots). Every field must be given, by position: a call with 16 or more
    keywords costs ~0.5 µs more than with 15 (CPython's keyword dict grows there);
    tests/unit/test_job.py checks that both build equal jobs.
    """
    draft: Any = _JobDraft(*values)
    draft.__class__ = Job
    return cast(Job, draft)


_READ = {
    "int": "int({})",
    "time": "int({})",
    "priority": "int({})",
    "text": "{}.decode()",
    "trace": '{}.decode("ascii", "replace")',
    "payload": "decode_payload({})",
    "callback": "Callback.unpack({})",
    "flag": '{} == b"1"',
}
"""How `Job.from_entry` reads a field of each `EntryField.kind`: an expression of its bytes."""


def entry_reader_source() -> str:
    """The source of `Job.from_entry`'s decoder, written from `READY_ENTRY`: an optional
    field absent or empty is its `Job` attribute's default (a flag False), a field with a
    default takes it when absent, any other must be there; `_built` makes the `Job`, each
    value given by position."""
    lines, values = [], {}
    unset = {f.name: f.default for f in dataclasses.fields(Job)}
    for f in READY_ENTRY:
        if f.job is None:
            continue
        read = _READ[f.kind]
        if f.kind == "flag":
            value = read.format(f"fields.get({f.name!r})")
        elif f.optional:
            lines.append(f"    {f.job} = fields.get({f.name!r})")
            value = f"{read.format(f.job)} if {f.job} else {unset[f.job]!r}"
        elif f.default is not None:
            value = read.format(f"fields.get({f.name!r}, {f.default!r})")
        else:
            value = read.format(f"fields[{f.name!r}]")
        if f.optional or f.kind == "flag":
            values[f.job] = value
        else:  # read in the table's order, so a missing field is the first one the table has
            lines.append(f"    {f.job} = {value}")
            values[f.job] = f.job
    values |= {"entry_id": "entry_id", "shard": "shard", "deliveries": "deliveries"}
    order = [f.name for f in dataclasses.fields(Job)]
    if sorted(values) != sorted(order):
        raise TypeError(f"READY_ENTRY fills {sorted(values)}, not every Job field: {order}")
    return "\n".join(
        [
            "def read_entry(fields, entry_id, shard, deliveries):",
            *lines,
            "    return _built(",
            *(f"        {values[name]},  # {name}" for name in order),
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
