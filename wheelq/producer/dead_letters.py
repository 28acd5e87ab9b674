"""Dead-letter operations for the clients: list, replay, purge — written once, sans-I/O.

Like `wheelq.producer.operations`, each operation is a generator that yields
lists of `Call`s and returns its result; `Client` and `AsyncClient` drive
them. A dead letter is addressed by its ref ``"shard/entry-id"``.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Iterable

from wheelq.core.dead import DeadLetter, parse_ref
from wheelq.core.job import entry_ms
from wheelq.core.keys import ShardKeys, all_shards, validate_shards
from wheelq.errors import InvalidArgumentError
from wheelq.producer.operations import Op, Producer
from wheelq.store import consume

Refs = Iterable[str | DeadLetter] | None

IDS_PER_CALL = 500
MAX_LIMIT = 100_000


def dead_letters(producer: Producer, topic: str, limit: int) -> Op[list[DeadLetter]]:
    """The topic's oldest `limit` dead letters, oldest first, across shards."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidArgumentError(
            "limit", f"limit must be an int in [1, {MAX_LIMIT}], got {limit!r}"
        )
    shards = yield from producer.shard_count(topic, create=False)
    if shards is None:
        return []
    pages = yield [consume.read_dead(k, "-", limit) for k in all_shards(topic, shards)]
    merged = heapq.merge(
        *(
            [(entry_ms(entry_id), shard, entry_id, fields) for entry_id, fields in page]
            for shard, page in enumerate(pages)
        ),
        key=lambda row: (row[0], row[2], row[1]),
    )
    out = []
    for _, shard, entry_id, fields in merged:
        out.append(DeadLetter.from_entry(topic, shard, entry_id, fields))
        if len(out) == limit:
            break
    return out


def replay(producer: Producer, topic: str, refs: Refs) -> Op[int]:
    """Run dead letters again (all of them when `refs` is None); returns how many were.
    Malformed ones (no job id or payload) cannot be and stay where they are."""
    by_shard = _by_shard(refs)
    shards = yield from producer.shard_count(topic, create=False)
    if shards is None:
        return 0
    _check_shards(by_shard, shards)
    replayed = 0
    for keys in all_shards(topic, shards):
        if by_shard is None:
            ids = yield from _all_ids(keys)
        else:
            ids = by_shard.get(keys.shard, [])
        for i in range(0, len(ids), IDS_PER_CALL):
            ((n, _unreplayable),) = yield [consume.replay(keys, ids[i : i + IDS_PER_CALL])]
            replayed += n
    return replayed


def purge_dead(producer: Producer, topic: str, refs: Refs) -> Op[int]:
    """Delete dead letters (all of them when `refs` is None); returns how many went."""
    by_shard = _by_shard(refs)
    shards = yield from producer.shard_count(topic, create=False)
    if shards is None:
        return 0
    _check_shards(by_shard, shards)
    if by_shard is None:
        counts = yield [consume.purge_dead(k, None) for k in all_shards(topic, shards)]
    else:
        counts = yield [
            consume.purge_dead(ShardKeys(topic, shard), ids[i : i + IDS_PER_CALL])
            for shard, ids in by_shard.items()
            for i in range(0, len(ids), IDS_PER_CALL)
        ]
    return sum(counts)


def _all_ids(keys: ShardKeys) -> Op[list[str]]:
    ids: list[str] = []
    start = "-"
    while True:
        (page,) = yield [consume.read_dead(keys, start, IDS_PER_CALL)]
        ids += [entry_id for entry_id, _ in page]
        if len(page) < IDS_PER_CALL:
            return ids
        start = "(" + page[-1][0]


def _by_shard(refs: Refs) -> dict[int, list[str]] | None:
    """Validate refs (before anything is sent) and group them by shard."""
    if refs is None:
        return None
    if isinstance(refs, str | bytes | DeadLetter):
        raise InvalidArgumentError(
            "refs", f"refs must be a list of refs or DeadLetters (or None), got {refs!r:.60}"
        )
    out: dict[int, list[str]] = defaultdict(list)
    for ref in refs:
        shard, entry_id = parse_ref(ref.ref if isinstance(ref, DeadLetter) else ref)
        out[shard].append(entry_id)
    return dict(out)


def _check_shards(by_shard: dict[int, list[str]] | None, shards: int) -> None:
    for shard in by_shard or ():
        if shard >= validate_shards(shards):
            raise InvalidArgumentError(
                "refs", f"ref shard {shard} is out of range: the topic has {shards} shards"
            )
