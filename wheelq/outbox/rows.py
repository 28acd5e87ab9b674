"""Outbox rows as the relay takes them: each checked as `enqueue` checks its arguments (the
producer's validators, limits and error types), then held for the replay; a row that fails
is refused alone, with a reason naming its column and the accepted range
(docs/architecture.md, "The outbox relay").

`enqueue` checks a job before its INSERT, but rows are also written by plain SQL (another
writer, a migration, the runbook's resend), so the relay trusts none of them. The envelope
check is at least as strict as enqueue.lua's (``wq_envelope``): Redis never answers MALFORMED
to a row the relay sends, which would leave the rows before it in its shard call fired and
the rest unwritten.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgpack

from wheelq.core import keys as k
from wheelq.core.due import at_ms, delay_ms, latest_at_ms
from wheelq.core.job import ENVELOPE_VERSION
from wheelq.core.options import KINDS, STORED, Option, checked, validate_max_attempts
from wheelq.core.payload import decode_payload
from wheelq.errors import InvalidArgumentError, MalformedJobError, int_in
from wheelq.producer.replay import HeldJob

SKEW_MS = 86_400_000
"""How far the clock that wrote a row may be ahead of the database's clock at the take: an
``at`` may be ten years past the database's clock plus this (`enqueue` checks it on the
application's clock), and `written_ms` at most this past it."""

MAX_ATTEMPT = 2**31 - 1  # an envelope's attempt and max_attempts as enqueue.lua accepts them
_HEAD = 7  # version, payload, attempt, max, enqueued, group, job id; then a stored option's
_ENVELOPE_FIELDS = range(5, _HEAD + len(STORED) + 1)


def taken(
    found: Sequence[tuple[Any, ...]],
) -> tuple[list[HeldJob], list[tuple[HeldJob, str]], int, int]:
    """The rows of one take (the relay's ``TAKE`` columns), in their order: those to place,
    those refused with why, the database's clock when they were taken, and how many rows
    the take's head had (taken, or left waiting behind an older version held elsewhere)."""
    good: list[HeldJob] = []
    refused: list[tuple[HeldJob, str]] = []
    now_pg = head = 0
    for found_row in sorted(found):
        seq, topic, job_id, mode, value_ms, replace, envelope, written_ms, order_key, now = (
            found_row[:10]
        )
        due_ms = written_ms + value_ms if mode == "d" else value_ms
        row = HeldJob(
            seq, topic, job_id, mode, due_ms, replace, bytes(envelope), written_ms, "", order_key
        )
        why = refusal(row, value_ms, now)
        if why is None:
            good.append(row)
        else:
            refused.append((row, why))
        now_pg, head = now, found_row[10]
    return good, refused, now_pg, head


def refusal(row: HeldJob, value_ms: int, now_ms: int) -> str | None:
    """Why `row` can never be placed (its column, the error, the accepted range), or None.

    `value_ms` is the row's column (a delay for mode ``d``, a due time for ``a``); `now_ms`
    the database's clock at the take."""
    column = "topic"
    try:
        k.validate_topic(row.topic)
        column = "job_id"
        k.validate_job_id(row.job_id)
        column = f"value_ms = {value_ms} (mode {row.mode!r})"
        if row.mode == "d":
            delay_ms(value_ms / 1000)
        elif row.mode == "a":
            at_ms(value_ms / 1000, latest_ms=latest_at_ms(now_ms + SKEW_MS))
        else:
            raise InvalidArgumentError("mode", f"mode must be 'd' or 'a', got {row.mode!r}")
        column = "written_ms"
        int_in("written_ms", row.written_ms, 0, now_ms + SKEW_MS)
        column = "envelope"
        key, ordered = _checked_envelope(row)
        column = "order_key"
        _check_order(row, key, ordered)
    except (InvalidArgumentError, MalformedJobError) as exc:
        return f"{column}: {type(exc).__name__}: {exc}"
    return None


def _checked_envelope(row: HeldJob) -> tuple[str, bool]:
    """The envelope's key and ordered flag, once it is an envelope `enqueue` could have made
    (`MalformedJobError` naming why, or the field's own error)."""

    def malformed(why: str) -> MalformedJobError:
        return MalformedJobError(row.topic, row.job_id, why)

    try:  # str and bin told apart: enqueue.lua's cmsgpack reads no bin
        fields = msgpack.unpackb(row.envelope, raw=False, unicode_errors="surrogateescape")
    except Exception as exc:  # msgpack raises several unrelated types
        raise malformed(f"not msgpack ({type(exc).__name__}: {exc})") from exc
    if not isinstance(fields, list) or len(fields) not in _ENVELOPE_FIELDS:
        raise malformed(f"not an array of 5-{_ENVELOPE_FIELDS[-1]} fields but {fields!r:.80}")
    version, payload, attempt, max_attempts, enqueued_ms, *rest = fields
    if type(version) is not int or version != ENVELOPE_VERSION:
        raise malformed(f"unknown envelope version {version!r:.40}")
    if not isinstance(payload, str):
        raise malformed(f"payload is a {type(payload).__name__}, not a msgpack str")
    try:
        decode_payload(payload.encode("utf-8", "surrogateescape"))
    except Exception as exc:  # msgpack raises several unrelated types
        raise malformed(f"payload is not msgpack ({type(exc).__name__}: {exc})") from exc
    int_in("attempt", attempt, 0, MAX_ATTEMPT)
    validate_max_attempts(max_attempts)
    int_in("enqueued_ms", enqueued_ms, 0, 2**63 - 1)
    for place, value in enumerate(rest, 6):
        if not isinstance(value, str):
            raise malformed(f"field {place} is a {type(value).__name__}, not a msgpack str")
    options = {}
    for place, (o, slot) in enumerate(zip(STORED, rest[_HEAD - 5 :], strict=False), _HEAD + 1):
        if slot:
            options[o.name] = _checked_slot(o, place, slot, malformed)
    return options.get("key", ""), options.get("ordered", False)


def _checked_slot(
    o: Option, place: int, slot: str, malformed: Callable[[str], MalformedJobError]
) -> Any:
    """A stored option's `Envelope` value from its slot, once the slot is spelled as a writer
    spells it (`Kind`) and the value is one its row's check takes (that error, named)."""
    kind = KINDS[o.kind or ""]
    raw = slot.encode("utf-8", "surrogateescape")
    try:
        value = kind.read(raw)
        again = kind.slot(value)
    except ValueError as exc:  # UnicodeDecodeError too
        raise malformed(f"field {place} ({o.name}) cannot be read: {exc}") from exc
    if (again.encode() if isinstance(again, str) else again) != raw:
        raise malformed(f"field {place} ({o.name}) is no value of it: {slot!r:.40}")
    try:
        shown = kind.to_job(value)
    except ValueError as exc:
        raise InvalidArgumentError(o.name, f"the envelope's {o.name}: {exc}") from exc
    checked(o, shown)
    return value


def _check_order(row: HeldJob, key: str, ordered: bool) -> None:
    """The row's order key is the envelope's key when the job is ordered, else empty; an
    ordered job is due at a time (its place in the order)."""
    wanted = key if ordered else ""
    if row.order_key != wanted:
        raise InvalidArgumentError(
            "order_key",
            f"order_key must be the envelope's key when the job is ordered, else '': "
            f"{wanted!r:.80}, got {row.order_key!r:.80}",
        )
    if ordered and row.mode != "a":
        raise InvalidArgumentError(
            "order_key", f"an ordered job is due at a time (mode 'a'), got mode {row.mode!r}"
        )
