"""Columnar bulk enqueue (`Client.enqueue_bulk`): many payloads that share their timing and
options, encoded a column at a time (the payloads, the ids made in one block, the envelopes
from one shared head and tail, each shard's share as two plain lists) with no Python object
per job beyond its packed payload and envelope (docs/guides/producing.md, "Many jobs").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import msgpack

from wheelq.core.due import DueSpec
from wheelq.core.ids import RANDOM_CHARS, random_parts, time_part
from wheelq.core.job import ENVELOPE_VERSION, envelope_fields
from wheelq.core.keys import ShardKeys, shard_of
from wheelq.core.options import orders
from wheelq.core.payload import MAX_PAYLOAD_DEPTH, check_depth, encode_payload, payload_packer
from wheelq.errors import InvalidArgumentError, PayloadTooLargeError, PayloadTypeError
from wheelq.store import enqueue
from wheelq.store.call import Call
from wheelq.store.scripts import Placed


class Columns(NamedTuple):
    """A bulk enqueue encoded: every id in the caller's order, and per shard its ids and
    envelopes (in the same order)."""

    ids: list[str]
    shards: dict[int, tuple[list[str], list[bytes]]]
    orders: bool = False
    """Their priority is not the default: their shards order their due jobs."""


def payload_list(payloads: Iterable[Any]) -> list[Any]:
    """`payloads` as a list; a single payload that happens to be iterable is refused."""
    if isinstance(payloads, str | bytes | bytearray | Mapping) or not isinstance(
        payloads, Iterable
    ):
        raise InvalidArgumentError(
            "payloads", f"payloads must be a list (or iterable) of payloads, got {payloads!r:.60}"
        )
    return payloads if isinstance(payloads, list) else list(payloads)


def encode(
    payloads: list[Any],
    max_payload_bytes: int,
    max_attempts: int,
    now_ms: int,
    options: tuple[Any, ...],
    shards: int,
) -> Columns:
    """Encode `payloads` (PayloadTypeError, PayloadTooLargeError naming ``payloads[i]``);
    `options`: the stored options' `Envelope` values all the jobs share."""
    ids, envelopes = encode_jobs(payloads, max_payload_bytes, max_attempts, now_ms, options)
    return by_shard(ids, envelopes, shards, orders(options))


def encode_jobs(
    payloads: list[Any],
    max_payload_bytes: int,
    max_attempts: int,
    now_ms: int,
    options: tuple[Any, ...],
) -> tuple[list[str], list[bytes]]:
    """`encode`'s ids and envelopes, in the caller's order, before they are put by shard."""
    packed = _packed(payloads, max_payload_bytes)
    envelopes = _envelopes(packed, max_attempts, now_ms, options)
    n = len(packed)
    head, block = time_part(now_ms), random_parts(n)
    ids = [head + block[i : i + RANDOM_CHARS] for i in range(0, RANDOM_CHARS * n, RANDOM_CHARS)]
    return ids, envelopes


def by_shard(ids: list[str], envelopes: list[bytes], shards: int, lined: bool) -> Columns:
    """Jobs put by shard (`lined`: their shards order their due jobs)."""
    columns: dict[int, tuple[list[str], list[bytes]]] = {s: ([], []) for s in range(shards)}
    for job_id, envelope in zip(ids, envelopes, strict=True):
        shard_ids, shard_envelopes = columns[shard_of(job_id, shards)]
        shard_ids.append(job_id)
        shard_envelopes.append(envelope)
    return Columns(ids, {s: c for s, c in columns.items() if c[0]}, lined)


def _packed(payloads: list[Any], max_bytes: int) -> list[bytes]:
    packer = payload_packer()
    pack = packer.pack
    try:
        packed = [pack(p) for p in payloads]  # plain types: one C call each
    except Exception:  # a tuple, a subclass, or no msgpack type: each on its own, named
        packed = []
        for i, p in enumerate(payloads):
            try:
                packed.append(encode_payload(p, max_bytes, packer))
            except InvalidArgumentError as exc:
                raise type(exc)("payloads", f"payloads[{i}]: {exc}") from exc
            except PayloadTypeError as exc:
                raise PayloadTypeError(f"payloads[{i}]: {exc}") from exc
    if packed and max(map(len, packed)) > MAX_PAYLOAD_DEPTH:  # else none can nest deeper
        for i, (p, data) in enumerate(zip(payloads, packed, strict=True)):
            try:
                if len(data) > MAX_PAYLOAD_DEPTH and isinstance(p, dict | list | tuple):
                    check_depth(p, data)
            except InvalidArgumentError as exc:
                raise type(exc)("payloads", f"payloads[{i}]: {exc}") from exc
    if packed and max(map(len, packed)) > max_bytes:
        i, size = next((i, len(p)) for i, p in enumerate(packed) if len(p) > max_bytes)
        raise PayloadTooLargeError(
            "payloads",
            f"payloads[{i}]: payload must encode to at most {max_bytes} bytes of msgpack, "
            f"got {size}",
        )
    return packed


def _envelopes(
    packed: list[bytes], max_attempts: int, now_ms: int, options: tuple[Any, ...]
) -> list[bytes]:
    """Each payload's envelope (`pack_envelope` of a job with these options): the shared
    head, the payload's msgpack raw header and bytes, the shared tail."""
    fields = envelope_fields(b"", 1, max_attempts, now_ms, options=options)
    empty: bytes = msgpack.packb(fields, use_bin_type=False)
    # fixarray header, the version, then 0xa0 (an empty raw) where the payload goes
    at = 1 + len(msgpack.packb(ENVELOPE_VERSION))
    head, tail = empty[:at], empty[at + 1 :]
    heads: dict[int, bytes] = {}
    out = []
    for payload in packed:
        size = len(payload)
        prefix = heads.get(size)
        if prefix is None:
            prefix = heads[size] = head + _raw_header(size)
        out.append(prefix + payload + tail)
    return out


def _raw_header(size: int) -> bytes:
    """msgpack's raw (str) header for `size` bytes, as `use_bin_type=False` writes it."""
    if size < 32:
        return bytes((0xA0 | size,))
    if size < 1 << 16:
        return b"\xda" + size.to_bytes(2, "big")
    return b"\xdb" + size.to_bytes(4, "big")


def enqueue_calls(
    topic: str, due: DueSpec, columns: Columns, size: int
) -> list[tuple[list[str], Call[list[Placed]]]]:
    """The ``enqueue.lua`` calls that place `columns`, at most `size` jobs each."""
    calls = []
    for shard, (ids, envelopes) in columns.shards.items():
        keys = ShardKeys(topic, shard)
        for i in range(0, len(ids), size):
            chunk = ids[i : i + size]
            envelope_chunk = envelopes[i : i + size]
            call = enqueue.enqueue_columns(keys, due, chunk, envelope_chunk, orders=columns.orders)
            calls.append((chunk, call))
    return calls


def as_writes(due: DueSpec, columns: Columns) -> list[enqueue.JobWrite]:
    """The jobs as `JobWrite`s, in the caller's order (for the spool, which keeps them)."""
    envelope_of = {
        job_id: envelope
        for ids, envelopes in columns.shards.values()
        for job_id, envelope in zip(ids, envelopes, strict=True)
    }
    lined = columns.orders
    return [
        enqueue.JobWrite(i, due, False, envelope_of[i], "", "", True, lined) for i in columns.ids
    ]
