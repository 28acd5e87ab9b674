"""Placing validated writes: `enqueue.lua` calls by shard and batch, sent in pipelined rounds.

`enqueue_calls` groups a call's writes by shard into script calls of `batch_size`. For a
spooling client's direct try (`record_ms` > 0) each script call gets a token the shard
records if it applies the call, and each of its writes, in the caller's list itself,
becomes a copy with the token ``CALL:n``: if the reply is lost and the writes are spooled,
their replay is skipped where the call was applied (``enqueue.lua``).

`send_calls` sends them `PIPELINE_CALLS` at a time and turns the outcomes into the ids, or
the typed error of a full topic or of pending duplicates.
"""

from __future__ import annotations

import secrets
from collections import defaultdict
from collections.abc import Generator
from typing import Any

from wheelq.core import keys as k
from wheelq.errors import DuplicateJobError, ScriptError, TopicFullError
from wheelq.store import job_writes
from wheelq.store.executor import Call
from wheelq.store.scripts import Placed

PIPELINE_CALLS = 64
"""Script calls per round trip in enqueue_many: 32,000 jobs of the default batch size, each
call written as it is packed (`wheelq.store.executor.stream`), so Redis runs the first while the
client packs the rest; the spooling client's confirmed ids grow round by round."""

Placing = list[tuple[list[job_writes.JobWrite], Call[list[Placed]]]]
"""Each script call with the writes it carries."""


def enqueue_calls(
    topic: str, writes: list[job_writes.JobWrite], shards: int, size: int, record_ms: int = 0
) -> Placing:
    """The script calls that place `writes` (by shard, `size` per call); `record_ms` > 0
    gives each a recorded call token and its writes ``CALL:n`` tokens, in `writes`."""
    by_shard: dict[int, list[int]] = defaultdict(list)  # shard -> indexes in writes
    for n, w in enumerate(writes):
        by_shard[k.shard_of(w.id, shards)].append(n)
    calls: Placing = []
    for shard, indexes in by_shard.items():
        keys = k.ShardKeys(topic, shard)
        for i in range(0, len(indexes), size):
            token = "c" + secrets.token_hex(8) if record_ms else ""
            for m, n in enumerate(indexes[i : i + size] if token else ()):
                writes[n] = writes[n]._replace(token=f"{token}:{m}")
            chunk = [writes[n] for n in indexes[i : i + size]]
            calls.append((chunk, job_writes.enqueue(keys, chunk, record_ms, token)))
    return calls


def send_calls(
    topic: str, writes: list[job_writes.JobWrite], calls: Placing, applied: list[str] | None
) -> Generator[list[Call[Any]], list[Any], list[str]]:
    """Send `calls` in rounds; returns the ids of `writes`, appending each round's applied
    ids to `applied` as it is confirmed.

    Raises:
        TopicFullError: Some shard would have passed its pending limit.
        DuplicateJobError: Some ids were pending already (and not to be replaced).
    """
    duplicates: list[str] = []
    full: list[str] = []
    for i in range(0, len(calls), PIPELINE_CALLS):
        round_ = calls[i : i + PIPELINE_CALLS]
        replies = yield [call for _, call in round_]
        for (chunk, _), outcomes in zip(round_, replies, strict=True):
            if len(outcomes) != len(chunk):
                raise ScriptError(f"enqueue.lua answered {len(outcomes)} of {len(chunk)} jobs")
            # `in` scans in C: most calls have neither outcome, and need no loop per job
            if Placed.DUPLICATE in outcomes or Placed.FULL in outcomes:
                for w, o in zip(chunk, outcomes, strict=True):
                    if o == Placed.DUPLICATE:
                        duplicates.append(w.id)
                    elif o == Placed.FULL:
                        full.append(w.id)
            if applied is not None:
                taken = zip(chunk, outcomes, strict=True)
                applied += [w.id for w, o in taken if o != Placed.FULL]
    ids = [w.id for w in writes]
    if full:
        refused = set(full) | set(duplicates)
        raise TopicFullError(topic, full, [i for i in ids if i not in refused], ids)
    if duplicates:
        dup = set(duplicates)
        raise DuplicateJobError(topic, duplicates, [i for i in ids if i not in dup])
    return ids
