"""Enqueue items (`EnqueueItem`) validated and encoded into `JobWrite`s before anything is
sent; `validate_batch` takes plain items by a short path that writes the same.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any, cast

import msgpack

from wheelq.core import keys as k
from wheelq.core.due import At, Delay, DueSpec, due_spec
from wheelq.core.expiry import absolute
from wheelq.core.ids import RANDOM_CHARS, random_parts, time_part
from wheelq.core.job import envelope_fields
from wheelq.core.options import (
    ITEM_FIELDS,
    STORED,
    EnqueueItem,
    EnqueueOptions,
    orders,
    stored_values,
    validate_max_attempts,
)
from wheelq.core.payload import encode_payload, payload_packer
from wheelq.core.settings import ClientSettings
from wheelq.errors import InvalidArgumentError, InvalidJobIdError, PayloadTypeError
from wheelq.producer import enqueue_bulk as bulk
from wheelq.store import enqueue

__all__ = ["EncodeBatch", "EnqueueItem", "alike", "columns_of", "validate_batch", "validate_item"]

_ITEM_FIELDS = frozenset(ITEM_FIELDS)
_ID = ITEM_FIELDS.index("job_id")
_TAIL = _ID + 1
_PLAIN_TAIL = tuple(EnqueueItem._field_defaults[f] for f in ITEM_FIELDS[_TAIL:])  # a plain item
# A plain item's flags are False itself (0 == False): `validate_batch` asks each `is False`
# in line. A new flag option: one more there (this line then fails at import).
_REPLACE, _ORDERED = (i for i, v in enumerate(_PLAIN_TAIL, _TAIL) if v is False)
_KEY = [o.name for o in STORED].index("key")  # in `EnqueueOptions.stored`
EXPIRES = [o.name for o in STORED].index("expires")
_EXPIRES_ITEM = ITEM_FIELDS.index("expires")


def validate_batch(
    settings: ClientSettings,
    items: Iterable[EnqueueItem | Mapping[str, Any]],
    traceparent: str | None,
    now_ms: int,
    batch: EncodeBatch | None = None,
) -> list[enqueue.JobWrite]:
    """Every item validated and encoded, in order (errors name the item: ``items[3]: ...``)."""
    # A single item is iterable too (a named tuple): it is refused, not taken field by field.
    if isinstance(items, str | bytes | Mapping | EnqueueItem) or not isinstance(items, Iterable):
        raise InvalidArgumentError(
            "items", f"items must be an iterable of EnqueueItem or mappings, got {items!r:.60}"
        )
    writes: list[enqueue.JobWrite] = []
    if batch is None:
        batch = EncodeBatch(now_ms, traceparent)
    # a plain item's envelope: these fields, packed with its payload in place 1
    unset = stored_values(EnqueueItem(payload=None), traceparent)
    plain = envelope_fields(b"", 1, settings.default_max_attempts, now_ms, options=unset)
    for index, item in enumerate(items):
        try:
            # `is False`: 0 == False, and a replace or ordered of 0 is refused by validate_item
            if (
                type(item) is EnqueueItem
                and item[_TAIL:] == _PLAIN_TAIL
                and item[_REPLACE] is item[_ORDERED] is False
            ):
                due = batch.due(item.delay, item.at)
                if item[_ID] is None:
                    writes.append(_plain_write(settings, item.payload, due, batch, plain))
                else:
                    writes.append(_own_id_write(settings, item, due, batch, plain))
                continue
            writes.append(validate_item(settings, item, batch))
        except InvalidArgumentError as exc:
            raise type(exc)(exc.parameter, f"items[{index}]: {exc}") from exc
        except PayloadTypeError as exc:
            raise PayloadTypeError(f"items[{index}]: {exc}") from exc
    return writes


def alike(items: object) -> EnqueueItem | None:
    """The first of `items` when they are a list of plain items with generated ids (no field
    set after `at`) whose delay and time are the very objects of the first's, else None: the
    batch `enqueue_bulk`'s columns write as `validate_batch` would, with no object a job
    (docs/architecture.md, "Fast paths").

    The same objects, not equal values: ``True == 1`` and ``1.0 == 1``, which `due_spec` may
    judge apart; a list of items made in one comprehension shares them. Checking a job
    costs about an eighth of encoding it (py-spy of `enqueue_many`: 2.6% of the call against
    20%)."""
    if type(items) is not list or len(items) < 2:
        return None
    first = items[0]
    if type(first) is not EnqueueItem or first[_ID] is not None:
        return None
    delay, at = first[1], first[2]
    for item in items:
        if not (
            type(item) is EnqueueItem
            and item[1] is delay
            and item[2] is at
            and item[_ID] is None
            and item[_TAIL:] == _PLAIN_TAIL
            and item[_REPLACE] is item[_ORDERED] is False
        ):
            return None
    return first


def columns_of(
    settings: ClientSettings, items: object, batch: EncodeBatch
) -> tuple[DueSpec, list[str], list[bytes], bool] | None:
    """`validate_batch` of alike items (`alike`) as `enqueue_bulk` encodes its jobs: their due,
    ids and envelopes, and whether their shards order their due jobs; None when they are not
    alike or one is bad (`validate_batch` then names it)."""
    first = alike(items)
    if first is None:
        return None
    try:
        due = batch.due(first.delay, first.at)
        stored = stored_values(first, batch.traceparent)
        ids, envelopes = bulk.encode_jobs(
            [item[0] for item in cast(list[EnqueueItem], items)],
            settings.max_payload_bytes,
            settings.default_max_attempts,
            batch.now_ms,
            stored,
        )
    except (InvalidArgumentError, PayloadTypeError):
        return None
    return due, ids, envelopes, orders(stored)


def validate_options(
    settings: ClientSettings, item: EnqueueItem, batch: EncodeBatch
) -> EnqueueOptions:
    """`item`'s options checked, each by its row of `OPTIONS` (errors name it)."""
    return EnqueueOptions._make(_checked(settings, item, batch))


def _checked(
    settings: ClientSettings, item: EnqueueItem, batch: EncodeBatch
) -> tuple[DueSpec, str | None, bool, int, tuple[Any, ...]]:
    """`validate_options`' fields, as a plain tuple (`validate_item` reads them once a job)."""
    due = batch.due(item.delay, item.at)
    # the default is checked with the settings (Range(1, 1000))
    if item.max_attempts is None:
        attempts = settings.default_max_attempts
    else:
        attempts = validate_max_attempts(item.max_attempts)
    if not isinstance(item.replace, bool):
        raise InvalidArgumentError("replace", f"replace must be a bool, got {item.replace!r}")
    job_id = None if item.job_id is None else k.validate_job_id(item.job_id)
    stored = stored_values(item, batch.traceparent)
    if item[_EXPIRES_ITEM] is not None:  # seconds from now: from this call's clock
        stored = absolute(stored, EXPIRES, batch.now_ms)
    if item[_ORDERED] and due.kind == "delay":
        # Its order is its due time: fixed here, on this client's clock, for both writes.
        due = DueSpec("at", batch.now_ms + due.value_ms)
    return due, job_id, item.replace, attempts, stored


def validate_item(
    settings: ClientSettings, item: EnqueueItem | Mapping[str, Any], batch: EncodeBatch
) -> enqueue.JobWrite:
    job = item if isinstance(item, EnqueueItem) else item_from_mapping(item)
    due, given_id, replace, attempts, stored = _checked(settings, job, batch)
    payload = encode_payload(job.payload, settings.max_payload_bytes, batch.payloads)
    if given_id is None:
        job_id = batch.new_id()  # 80 random bits: no caller's id equals it
    elif given_id in batch.seen:  # (`own_id` in line: a call a job)
        raise twice(given_id)
    else:
        batch.seen.add(job_id := given_id)
    if job.callback is not None:
        batch.callbacks = True
    fields = envelope_fields(payload, 1, attempts, batch.now_ms, "", "", stored)
    envelope: bytes = batch.envelopes.pack(fields)
    order_key: str = stored[_KEY] if job[_ORDERED] else ""
    return enqueue.JobWrite(
        job_id,
        due,
        replace,
        envelope,
        "",
        order_key,
        given_id is None,
        orders(stored),
        stored[_KEY] or "",
    )


def _plain_write(
    settings: ClientSettings, payload: Any, due: DueSpec, batch: EncodeBatch, fields: list[Any]
) -> enqueue.JobWrite:
    """`validate_item` of a plain item at half the cost: `fields` with the payload in place."""
    fields[1] = encode_payload(payload, settings.max_payload_bytes, batch.payloads)
    envelope: bytes = batch.envelopes.pack(fields)
    return enqueue.JobWrite(batch.new_id(), due, False, envelope, "", "", True)


def _own_id_write(
    settings: ClientSettings, item: EnqueueItem, due: DueSpec, batch: EncodeBatch, fields: list[Any]
) -> enqueue.JobWrite:
    """`_plain_write` of a plain item but for its own id, checked in `validate_item`'s order."""
    job_id = k.validate_job_id(item.job_id)
    fields[1] = encode_payload(item.payload, settings.max_payload_bytes, batch.payloads)
    envelope: bytes = batch.envelopes.pack(fields)
    return enqueue.JobWrite(batch.own_id(job_id), due, False, envelope, "", "", False)


def twice(job_id: str) -> InvalidJobIdError:
    """The error of an id given twice in one batch."""
    return InvalidJobIdError("job_id", f"job_id {job_id!r} appears twice in one batch")


def item_from_mapping(item: Mapping[str, Any]) -> EnqueueItem:
    if not isinstance(item, Mapping):
        raise InvalidArgumentError(
            "items", f"items must be EnqueueItem or mappings, got {type(item).__name__}"
        )
    unknown = sorted(set(item) - _ITEM_FIELDS, key=repr)
    if unknown:
        raise InvalidArgumentError(
            unknown[0], f"unknown item key {unknown[0]!r}; known: {', '.join(sorted(_ITEM_FIELDS))}"
        )
    if "payload" not in item:
        raise InvalidArgumentError("payload", "each item needs a 'payload'")
    return EnqueueItem(**item)


class EncodeBatch:
    """What one call's items share: the time, ids seen, per-thread packers, id randomness."""

    MAX_BLOCK_IDS = 1024

    def __init__(self, now_ms: int, traceparent: str | None = None) -> None:
        self.now_ms = now_ms
        self.traceparent = traceparent  # for jobs without their own
        self.seen: set[str] = set()  # the callers' own ids (a generated one repeats none)
        self.payloads, self.envelopes = _packers()
        self._time_part = time_part(now_ms)
        self._random = ""
        self._at = 0
        self._block_ids = 1  # one id's worth for a single enqueue; doubles per refill
        self._dues: dict[tuple[type, object, type, object], DueSpec] = {}
        self.callbacks = False  # some job of the call carries a callback

    def due(self, delay: Delay | None, at: At | None) -> DueSpec:
        """`due_spec(delay, at)`, once per distinct value (keyed by type: ``True == 1``)."""
        key = (type(delay), delay, type(at), at)
        try:
            return self._dues[key]
        except KeyError:
            due = self._dues[key] = due_spec(delay, at, now_ms=self.now_ms)
            return due
        except TypeError:  # unhashable: not a valid delay or time; due_spec says why
            return due_spec(delay, at, now_ms=self.now_ms)

    def own_id(self, job_id: str) -> str:
        """A caller's (checked) id, refused if it came before in this batch."""
        if job_id in self.seen:
            raise twice(job_id)
        self.seen.add(job_id)
        return job_id

    def new_id(self) -> str:
        at = self._at
        if at >= len(self._random):
            self._random, at = random_parts(self._block_ids), 0
            self._block_ids = min(self._block_ids * 2, self.MAX_BLOCK_IDS)
        self._at = at + RANDOM_CHARS
        return self._time_part + self._random[at : at + RANDOM_CHARS]


_local = threading.local()


def _packers() -> tuple[msgpack.Packer, msgpack.Packer]:
    pair: tuple[msgpack.Packer, msgpack.Packer] | None = getattr(_local, "packers", None)
    if pair is None:
        pair = (payload_packer(), msgpack.Packer(use_bin_type=False))
        _local.packers = pair
    return pair
