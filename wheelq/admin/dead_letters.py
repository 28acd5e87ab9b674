"""Dead letters (sans-I/O operations): list, replay, purge, by ref ``"shard/entry-id"``,
or all of them, or all matching a filter (the reason and the consumer group)."""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from wheelq.core.job import DeadLetter, Field, entry_order, parse_ref
from wheelq.core.job_list import JobFilter
from wheelq.core.keys import ShardKeys, all_shards, validate_shards
from wheelq.core.payload import MAX_PAYLOAD_DEPTH, stored_too_deep
from wheelq.core.retry import Reason
from wheelq.errors import InvalidArgumentError, PayloadTooDeepError, UnknownTopicError, int_in
from wheelq.producer.operations import Op, Producer
from wheelq.store import dead_letters as dead

Refs = Iterable[str | DeadLetter] | None

IDS_PER_CALL = 500
MAX_LIMIT = 100_000
"""The most dead letters one page holds."""

SCAN_PAGE = 1000  # dead letters read a round trip while a filter looks for matches
SCAN_LIMIT = 100_000
"""The most dead letters a filtered page reads through before it answers, unless its caller
says otherwise: its `next` goes on from there, so a filter that matches nothing costs a page
100 rounds of `SCAN_PAGE` at most. Every listing reads with it: `Admin.dead_letters` (its
`scan_limit` default), the HTTP API and the console, the jobs list's dead state and
``wheelq dlq list``."""
MAX_SCAN = 10**9


class Replayed(int):
    """How many dead letters a replay ran again; `skipped`: how many of those it was asked
    for cannot be and stay dead letters (malformed, or nested past `MAX_PAYLOAD_DEPTH`)."""

    skipped: int = 0

    @classmethod
    def of(cls, replayed: int, skipped: int) -> Replayed:
        out = cls(replayed)
        out.skipped = skipped
        return out


class DeadLetterPage(list[DeadLetter]):
    """A page of dead letters, oldest first; `next` is the following page's ``after``."""

    next: str | None = None
    """None when no dead letter follows. A filtered page may hold fewer than its limit and
    still have a next one: it stopped where its `scan_limit` ran out."""


@dataclass(frozen=True, slots=True)
class DeadFilter:
    """Dead letters of one reason and/or consumer group (None: any)."""

    reason: str | None = None
    group: str | None = None

    @classmethod
    def of(cls, reason: object, group: object) -> DeadFilter | None:
        """The filter (None when neither is given), else InvalidArgumentError (checked as a
        job list's: `JobFilter.of`)."""
        checked = JobFilter.of(group=group, reason=reason)
        if checked.reason is None and checked.group is None:
            return None
        return cls(checked.reason, checked.group)

    def matches(self, reason: str, group: str) -> bool:
        """Whether a dead letter of that reason and group matches."""
        return self.reason in (None, reason) and self.group in (None, group)

    def matches_entry(self, raw: Mapping[bytes, bytes]) -> bool:
        """Whether a dead-letter entry (its fields as stored) matches."""
        return self.matches(_text(raw.get(Field.REASON)), _text(raw.get(Field.GROUP)))


def _text(value: bytes | None) -> str:
    return (value or b"").decode("utf-8", "replace")


def dead_letters(
    producer: Producer,
    topic: str,
    limit: int,
    after: str | None = None,
    reason: str | None = None,
    group: str | None = None,
    scan_limit: int | None = SCAN_LIMIT,
) -> Op[DeadLetterPage]:
    """The topic's oldest `limit` dead letters across shards (of `reason` and `group` when
    given); `after`: the next page. A filter reads through at most `scan_limit` dead letters
    (None: all)."""
    match = DeadFilter.of(reason, group)
    int_in("limit", limit, 1, MAX_LIMIT)
    if scan_limit is not None:
        int_in("scan_limit", scan_limit, 1, MAX_SCAN)
    if after is not None:
        try:
            parse_ref(after)
        except InvalidArgumentError as exc:
            raise InvalidArgumentError("after", str(exc).replace("refs", "after")) from None
    out = DeadLetterPage()
    shards = yield from producer.shard_count(topic, create=False)
    if shards is None:
        raise UnknownTopicError(topic)
    if match is None:
        out += yield from _merged(topic, shards, limit, after)
        out.next = out[-1].ref if len(out) == limit else None
        return out
    budget = MAX_SCAN if scan_limit is None else scan_limit
    while True:
        asked = min(SCAN_PAGE, budget)
        page = yield from _merged(topic, shards, asked, after)
        budget -= len(page)
        for letter in page:
            if match.matches(letter.reason, letter.group):
                out.append(letter)
                if len(out) == limit:
                    out.next = letter.ref
                    return out
        if len(page) < asked:
            return out  # read to the end
        after = page[-1].ref
        if budget == 0:
            out.next = after  # the scan's limit ran out here: the next page goes on from it
            return out


def _merged(topic: str, shards: int, limit: int, after: str | None) -> Op[list[DeadLetter]]:
    """The oldest `limit` dead letters of every shard after the ref `after`."""
    starts = ["-"] * shards
    if after is not None:
        # the order's key is (ms, seq, shard): shards up to the cursor's start after its id
        cursor_shard, cursor_id = parse_ref(after)
        ms, seq = entry_order(cursor_id)
        for shard in range(shards):
            starts[shard] = f"({ms}-{seq}" if shard <= cursor_shard else f"{ms}-{seq}"
    pages = yield [dead.read_dead(k, starts[k.shard], limit) for k in all_shards(topic, shards)]
    merged = heapq.merge(
        *(
            [(*entry_order(entry_id), shard, entry_id, fields) for entry_id, fields in page]
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


def replay(
    producer: Producer, topic: str, refs: Refs, reason: str | None = None, group: str | None = None
) -> Op[Replayed]:
    """Run dead letters again (None: all, or all of `reason` and `group` when given).
    Malformed ones and those whose payload nests past `MAX_PAYLOAD_DEPTH` cannot be: they
    stay, counted as skipped (one named in `refs`: `InvalidArgumentError` or
    `PayloadTooDeepError`, and none is replayed); those past ``max_ready`` stay too."""
    match = DeadFilter.of(reason, group)
    shards, by_shard = yield from _targets(producer, topic, refs, match)
    if not shards:
        return Replayed.of(0, 0)
    if by_shard is not None:
        yield from _check_replayable(topic, by_shard)
    replayed = skipped = 0
    for keys in all_shards(topic, shards):
        if by_shard is None:
            ids, unreplayable = yield from _replayable_ids(keys, match)
            skipped += unreplayable
        else:
            ids = by_shard.get(keys.shard, [])
        for i in range(0, len(ids), IDS_PER_CALL):
            ((n, held, refused),) = yield [dead.replay(keys, ids[i : i + IDS_PER_CALL])]
            replayed += n
            skipped += len(refused)  # turned malformed meanwhile: the script leaves it too
            if held:
                break  # the shard is at its max_ready: the rest would be held too
    return Replayed.of(replayed, skipped)


def purge_dead(
    producer: Producer, topic: str, refs: Refs, reason: str | None = None, group: str | None = None
) -> Op[int]:
    """Delete dead letters for good (None: all, or all of `reason` and `group` when given);
    how many went."""
    match = DeadFilter.of(reason, group)
    shards, by_shard = yield from _targets(producer, topic, refs, match)
    if not shards:
        return 0
    if by_shard is None and match is None:
        counts = yield [dead.purge_dead(k, None) for k in all_shards(topic, shards)]
        return sum(counts)
    if by_shard is None:
        by_shard = {}
        for keys in all_shards(topic, shards):
            by_shard[keys.shard] = yield from _all_ids(keys, match)
    counts = yield [
        dead.purge_dead(ShardKeys(topic, shard), ids[i : i + IDS_PER_CALL])
        for shard, ids in by_shard.items()
        for i in range(0, len(ids), IDS_PER_CALL)
    ]
    return sum(counts)


def _check_replayable(topic: str, by_shard: dict[int, list[str]]) -> Op[None]:
    """`PayloadTooDeepError` if a named dead letter's payload nests past the limit a payload
    is enqueued under (stored by an older version): it would run again as no enqueue may;
    else `InvalidArgumentError` (refs) if it is malformed, which cannot run again
    (docs/reference/wire-format.md)."""
    for shard, ids in by_shard.items():
        keys = ShardKeys(topic, shard)
        for i in range(0, len(ids), IDS_PER_CALL):
            chunk = ids[i : i + IDS_PER_CALL]
            found = yield [dead.read_dead(keys, entry_id, 1) for entry_id in chunk]
            for entry_id, page in zip(chunk, found, strict=True):
                if not page or page[0][0] != entry_id:
                    continue
                if _too_deep(page[0][1]):
                    raise PayloadTooDeepError(
                        "payload",
                        f"dead letter {shard}/{entry_id}: payload must nest lists and maps at "
                        f"most {MAX_PAYLOAD_DEPTH} levels deep to run again, got more; nothing "
                        "was replayed (purge it, or enqueue a payload within the limit)",
                    )
                if _malformed(page[0][1]):
                    raise InvalidArgumentError(
                        "refs",
                        f"dead letter {shard}/{entry_id} is malformed (its entry could not be "
                        "decoded) and cannot be replayed; nothing was replayed (purge it, or "
                        "enqueue its job again)",
                    )


def _too_deep(raw: Mapping[bytes, bytes]) -> bool:
    payload = raw.get(Field.PAYLOAD)
    return payload is not None and stored_too_deep(payload)


def _malformed(raw: Mapping[bytes, bytes]) -> bool:
    """As ``replay.lua`` tells: reason malformed, or no job id and payload to run."""
    return raw.get(Field.REASON) == Reason.MALFORMED.encode() or not (
        raw.get(Field.ID) and Field.PAYLOAD in raw
    )


def _all_ids(keys: ShardKeys, match: DeadFilter | None) -> Op[list[str]]:
    """The ids of the shard's dead letters (those matching `match`), oldest first."""
    ids, _ = yield from _read_ids(keys, match, lambda raw: True)
    return ids


def _replayable_ids(keys: ShardKeys, match: DeadFilter | None) -> Op[tuple[list[str], int]]:
    """The ids of the shard's dead letters matching `match` that can run again, oldest
    first, and how many matched that cannot (malformed, or nested too deep: they stay)."""
    return (yield from _read_ids(keys, match, lambda r: not (_malformed(r) or _too_deep(r))))


def _read_ids(
    keys: ShardKeys, match: DeadFilter | None, keep: Callable[[Mapping[bytes, bytes]], bool]
) -> Op[tuple[list[str], int]]:
    """The ids of the shard's dead letters matching `match` that `keep` keeps, oldest
    first, and how many matched that it did not."""
    ids: list[str] = []
    left = 0
    start = "-"
    while True:
        (page,) = yield [dead.read_dead(keys, start, IDS_PER_CALL)]
        for entry_id, raw in page:
            if match is None or match.matches_entry(raw):
                if keep(raw):
                    ids.append(entry_id)
                else:
                    left += 1
        if len(page) < IDS_PER_CALL:
            return ids, left
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
    producer: Producer, topic: str, refs: Refs, match: DeadFilter | None
) -> Op[tuple[int, dict[int, list[str]] | None]]:
    """The topic's shard count (`UnknownTopicError`: no such topic) and the refs by shard
    (None: all)."""
    by_shard = _by_shard(refs)
    if by_shard is not None and match is not None:
        field = "reason" if match.reason is not None else "group"
        raise InvalidArgumentError(
            field, f"give refs or a filter ({field}=...), not both: refs are already chosen"
        )
    shards = yield from producer.shard_count(topic, create=False)
    if shards is None:
        raise UnknownTopicError(topic)
    for shard in by_shard or ():
        if shard >= validate_shards(shards):
            raise InvalidArgumentError(
                "refs", f"ref shard {shard} is out of range: the topic has {shards} shards"
            )
    return shards, by_shard
