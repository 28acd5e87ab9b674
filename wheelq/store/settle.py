"""Settling a run: ack (with its history record), retry, and dead letters, the calls a
worker's settler and a pull consumer send (docs/architecture.md, "The life of a job").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

from wheelq.core.history import SEPARATOR, pack_expired, pack_success
from wheelq.core.keys import ShardKeys, result_key
from wheelq.store.call import Call, script_call
from wheelq.store.scripts import check, script_keys, text


def ack(keys: ShardKeys, group: str, entry_ids: Sequence[str]) -> Call[int]:
    """Plain XACK, no history record (entries meant for another group, malformed ones)."""
    return Call(command=("XACK", keys.stream, group, *entry_ids), parse=int)


Done = tuple[str, str, int, int, bytes | None, int]
"""A run that succeeded: (entry id, job id, when it ended ms, how long it ran ms, what the
handler returned as msgpack: None when it returned None, the attempt: 0 when not known)."""

Started = tuple[str, int]
"""A handler that started: (job id, attempt)."""

Delivery = tuple[str, int]
"""One delivery of a pending entry, as a pull receipt names it: (consumer, count)."""


def ack_done(
    keys: ShardKeys,
    group: str,
    done: Sequence[Done],
    started: Sequence[Started] = (),
    result_ttl_ms: int = 0,
) -> Call[int]:
    """Ack succeeded runs and record them in the history; parses to how many were acked.
    `started`: handlers of the shard that started since the last round, noted first as job
    events while the topic has them on (one call: a job's start precedes its end).
    `result_ttl_ms`: keep each result apart (`result_key`) for this long, not in its record
    (a task's ``result_ttl``; 0: in the record, for as long as the history keeps it).

    The records are packed here as two msgpack arguments: in Lua they cost Redis more.
    """
    args, apart, apart_keys = _ack_args(keys, group, done, result_ttl_ms)
    args.append(_started_arg(started))
    if not apart_keys:
        return script_call("ack", keys, args, _acked)
    args += ["", apart]  # ARGV[7]: no pull receipts
    return Call("ack", (*script_keys("ack", keys), *apart_keys), args, parse=_acked)


def _acked(reply: Any) -> int:
    return int(check("ack", reply)[1])


def ack_delivered(
    keys: ShardKeys, group: str, done: Sequence[Done], deliveries: Sequence[Delivery]
) -> Call[list[int]]:
    """`ack_done` of pull receipts while pending to their delivery: 1 acked, 0 not, -1 later."""
    fences = msgpack.packb([v for d in deliveries for v in d], use_bin_type=False)

    def parse(reply: Any) -> list[int]:
        r = check("ack", reply)
        return [int(v) for v in r[2]] if len(r) > 2 else []

    args, _, _ = _ack_args(keys, group, done, 0)
    return script_call("ack", keys, [*args, "", fences], parse)


Expired = tuple[str, str, int, int]
"""An entry dropped at its expiry, unrun: (entry id, job id, when ms, the attempt)."""


def ack_expired(
    keys: ShardKeys,
    group: str,
    expired: Sequence[Expired],
    deliveries: Sequence[Delivery] = (),
) -> Call[int]:
    """Ack entries read past their expiry without running them: each noted ``X`` (expired)
    in the history, counted, an 'expired' event; parses to how many were acked (`deliveries`:
    a pull consumer's receipts, each acked only while pending to its delivery)."""
    suffix = SEPARATOR + group
    entries = [e[0] for e in expired]
    pairs: list[str | bytes] = []
    for entry, job_id, at_ms, _ in expired:
        pairs += [job_id + suffix, pack_expired(entry, at_ms)]
    attempts = msgpack.packb([e[3] for e in expired])
    fences: bytes | str = ""
    if deliveries:
        fences = msgpack.packb([v for d in deliveries for v in d], use_bin_type=False)
    args = [group, msgpack.packb(entries), msgpack.packb(pairs, use_bin_type=False), 0]
    args += [attempts, "", fences, "", "expired"]
    return script_call("ack", keys, args, lambda r: int(check("ack", r)[1]))


def _started_arg(started: Sequence[Started]) -> bytes | str:
    if not started:
        return ""
    packed: bytes = msgpack.packb([v for job in started for v in job], use_bin_type=False)
    return packed


def _ack_args(
    keys: ShardKeys, group: str, done: Sequence[Done], result_ttl_ms: int
) -> tuple[list[str | bytes | int], bytes, list[str]]:
    """ARGV[1-5] of ack.lua; with `result_ttl_ms`, ARGV[8] and the KEYS of the results
    kept apart (one per run that returned a result)."""
    suffix = SEPARATOR + group
    entries: list[str] = []
    pairs: list[str | bytes] = []
    attempts: list[int] = []
    results = 0
    apart: list[str | bytes | int] = [result_ttl_ms]
    apart_keys: list[str] = []
    for i, (entry, job_id, at_ms, took_ms, result, attempt) in enumerate(done, 1):
        entries.append(entry)
        field = job_id + suffix
        pairs.append(field)
        took = min(max(took_ms, 0), MAX_RUN_MS)
        pairs.append(pack_success(entry, at_ms, took, result, result_ttl_ms))
        attempts.append(attempt)
        if result is not None and result_ttl_ms:
            apart += [i, result]
            apart_keys.append(result_key(keys, field))
        elif result is not None:
            results += len(result)
    packed = [msgpack.packb(entries), msgpack.packb(pairs, use_bin_type=False)]
    args: list[str | bytes | int] = [group, *packed, results, msgpack.packb(attempts)]
    if apart_keys:
        return args, msgpack.packb(apart, use_bin_type=False), apart_keys
    return args, b"", apart_keys


MAX_RUN_MS = 2**32 - 1
"""The longest run time a success record holds (49 days); below 0 it holds 0."""


@dataclass(frozen=True, slots=True)
class Retried:
    """What `retry.lua` did: `done` (back as `member` due `due_ms`), else `cancelled` (acked,
    not put back: the job was cancelled after the run fired), `stale` or not pending."""

    done: bool
    due_ms: int = 0
    member: str = ""
    stale: bool = False
    cancelled: bool = False


def retry(
    keys: ShardKeys,
    group: str,
    entry_id: str,
    job_id: str,
    delay_ms: int,
    envelope: bytes,
    error: str = "",
    ended_ms: int = 0,
    delivery: Delivery | None = None,
) -> Call[Retried]:
    """Ack a failed run and put it back `delay_ms` from now, in `group` only (not when the
    job was cancelled since the run fired: a cancel is final)."""

    def parse(reply: Any) -> Retried:
        r = check("retry", reply)
        if r[1] == 1:
            return Retried(True, int(r[2]), text(r[3]))
        return Retried(False, stale=r[1] == -1, cancelled=r[1] == 2)

    args: list[str | bytes | int] = [group, entry_id, job_id, delay_ms, envelope]
    args += [keys.wake_channel, error, ended_ms]
    if delivery is not None:
        args += delivery
    return script_call("retry", keys, args, parse)


def dead_letter(keys: ShardKeys, group: str, entries: Sequence[tuple[str, str, str]]) -> Call[int]:
    """Dead-letter (entry id, reason, error) triples; parses to how many were."""
    args = _dead_letter_args(group, ("", 0), entries)
    return script_call("dead_letter", keys, args, lambda r: int(check("dead_letter", r)[1]))


def dead_letter_delivered(
    keys: ShardKeys, group: str, entry: tuple[str, str, str], delivery: Delivery
) -> Call[int]:
    """Dead-letter a pull receipt's (entry id, reason, error) while pending to `delivery`."""

    def parse(reply: Any) -> int:
        r = check("dead_letter", reply)
        return -1 if int(r[2]) else int(r[1])

    return script_call("dead_letter", keys, _dead_letter_args(group, delivery, [entry]), parse)


def _dead_letter_args(
    group: str, delivery: Delivery, entries: Sequence[tuple[str, str, str]]
) -> list[str | bytes | int]:
    args: list[str | bytes | int] = [group, *delivery]
    for entry_id, reason, error in entries:
        args += [entry_id, reason, error]
    return args
