"""Dead letters (sans-I/O operations): list, replay, purge, by ref ``"shard/entry-id"``."""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Iterable

from wheelq.core.job import DeadLetter, parse_ref
from wheelq.core.keys import ShardKeys, all_shards, validate_shards
from wheelq.errors import InvalidArgumentError, int_in
from wheelq.producer.operations import Op, Producer
from wheelq.store import consume

Refs = Iterable[str | DeadLetter] | None

IDS_PER_CALL = 500
MAX_LIMIT = 100_000


def dead_letters(
    producer: Producer, topic: str, limit: int, after: str | None = None
) -> Op[list[DeadLetter]]:
    """The topic's oldest `limit` dead letters across shards; `after`: the next page."""
    int_in("limit", limit, 1, MAX_LIMIT)
    cursor = None
    if after is not None:
        try:
            cursor_shard, cursor_id = parse_ref(after)
        except InvalidArgumentError as exc:
            raise InvalidArgumentError("after", str(exc).replace("refs", "after")) from None
        cursor = (*_id_key(cursor_id), cursor_shard)
    shards = yield from producer.shard_count(topic, create=False)
    if shards is None:
        return []
    starts = ["-"] * shards
    if cursor is not None:
        # the order's key is (ms, seq, shard): shards up to the cursor's start after its id
        ms, seq, shard_at = cursor
        for shard in range(shards):
            starts[shard] = f"({ms}-{seq}" if shard <= shard_at else f"{ms}-{seq}"
    pages = yield [consume.read_dead(k, starts[k.shard], limit) for k in all_shards(topic, shards)]
    merged = heapq.merge(
        *(
            [(*_id_key(entry_id), shard, entry_id, fields) for entry_id, fields in page]
            for shard, page in enumerate(pages)
        ),
        key=lambda row: row[:3],
    )
    out = []
    for _, _, shard, entry_id, fields in merged:
        out.append(DeadLetter.from_entry(topic, shard, entry_id, fields))
        if len(out) == limit:
            break
    return out


def _id_key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def replay(producer: Producer, topic: str, refs: Refs) -> Op[int]:
    """Run dead letters again (None: all); malformed ones and those past ``max_ready`` stay."""
    shards, by_shard = yield from _targets(producer, topic, refs)
    if not shards:
        return 0
    replayed = 0
    for keys in all_shards(topic, shards):
        if by_shard is None:
            ids = yield from _all_ids(keys)
        else:
            ids = by_shard.get(keys.shard, [])
        for i in range(0, len(ids), IDS_PER_CALL):
            ((n, held, _unreplayable),) = yield [consume.replay(keys, ids[i : i + IDS_PER_CALL])]
            replayed += n
            if held:
                break  # the shard is at its max_ready: the rest would be held too
    return replayed


def purge_dead(producer: Producer, topic: str, refs: Refs) -> Op[int]:
    shards, by_shard = yield from _targets(producer, topic, refs)
    if not shards:
        return 0
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


def _targets(
    producer: Producer, topic: str, refs: Refs
) -> Op[tuple[int, dict[int, list[str]] | None]]:
    """The topic's shard count (0: no such topic) and the refs by shard (None: all)."""
    by_shard = _by_shard(refs)
    shards = yield from producer.shard_count(topic, create=False)
    if shards is None:
        return 0, by_shard
    for shard in by_shard or ():
        if shard >= validate_shards(shards):
            raise InvalidArgumentError(
                "refs", f"ref shard {shard} is out of range: the topic has {shards} shards"
            )
    return shards, by_shard
