"""A key's jobs at once, through the key index (docs/architecture.md, "Jobs by key"): read
them on every shard (`key_rows`), cancel them or move them (`cancel_key`, `reschedule_key`),
each job by its own script call guarded by what was read, as a bulk action's act is: one that
fired, was cancelled or was written again since is left alone. The cost is the key's jobs,
whatever else the topic holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from wheelq.core.bulk_actions import Selected
from wheelq.core.due import MAX_SHIFT_MS, At, Delay, DueSpec, at_ms, latest_at_ms, shift_of
from wheelq.core.history import SEPARATOR
from wheelq.core.keys import ShardKeys, all_shards
from wheelq.core.options import validate_key
from wheelq.errors import InvalidArgumentError, UnknownTopicError, int_in
from wheelq.producer import trees
from wheelq.producer.operations import Op, Producer
from wheelq.store import enqueue
from wheelq.store import job_lists as lists

ACT_BATCH = 500
"""Script calls one round trip carries (as a bulk action's act)."""
KEY_CANCEL_BATCH = 500
"""A key's entries one `cancel.lua` call takes and cancels (about 10 ms of Redis)."""


def key_rows(
    views: Sequence[ShardKeys], key: str, stamps: bool = False, envelopes: bool = True
) -> Op[list[list[lists.StoredRow]]]:
    """Each shard's rows of `key` (`lists.key_jobs`: its pending jobs and retries, and those
    due on its line), its list read whole: a slice of every shard a round trip. Without
    `envelopes` the rows carry none (what an act by id needs)."""
    rows: list[list[lists.StoredRow]] = [[] for _ in views]
    starts = dict.fromkeys(range(len(views)), 0)
    most = lists.ENVELOPE_MAX if envelopes else 0
    while starts:
        order = list(starts)
        got = yield [lists.key_jobs(views[i], key, starts[i], stamps, most) for i in order]
        for i, part in zip(order, got, strict=True):
            rows[i] += part.rows
            if part.next is None:
                del starts[i]
            else:
                starts[i] = part.next
    return rows


def _found(
    producer: Producer, topic: str, key: object, stamps: bool = True
) -> Op[list[tuple[ShardKeys, dict[str, lists.StoredRow]]]]:
    """Each shard, with its jobs of `key` by id: the row to act on (a job under its id
    before its retries: one script call acts on every attempt of an id)."""
    validate_key(key)
    shards = yield from producer.shard_count(topic, create=False)
    if shards is None:
        raise UnknownTopicError(topic)
    views = all_shards(topic, shards)
    found = yield from key_rows(views, str(key), stamps, envelopes=False)
    out = []
    for keys, rows in zip(views, found, strict=True):
        by_id: dict[str, lists.StoredRow] = {}
        for row in sorted(rows, key=lambda r: r.retry):
            job_id = row.member.decode("utf-8", "replace").partition(SEPARATOR)[0]
            by_id.setdefault(job_id, row)
        out.append((keys, by_id))
    return out


def _guard(row: lists.StoredRow) -> Selected | None:
    """What the act checks the job is still (None: a job due on the line, acted on by id)."""
    if row.waiting or row.due_ms is None:
        return None
    return Selected(row.retry, row.due_ms, row.stamp or "")


def cancel_key(producer: Producer, topic: str, key: object) -> Op[int]:
    """Cancel every pending job of `key` (with each group's retry of it, and those due on
    the line): its list in each shard's key index taken from the head, `KEY_CANCEL_BATCH`
    entries a call, each id's attempts whose envelope carries the key cancelled as they are
    taken (`cancel.lua`; one written again meanwhile with another key is left alone, one
    written with this key is one of its jobs); how many jobs were cancelled."""
    validate_key(key)
    shards = yield from producer.shard_count(topic, create=False)
    if shards is None:
        raise UnknownTopicError(topic)
    views = all_shards(topic, shards)
    left = list(range(len(views)))
    done = 0
    while left:
        replies = yield [enqueue.cancel_key_entries(views[i], str(key), KEY_CANCEL_BATCH)
                         for i in left]  # fmt: skip
        done += sum(n for n, _ in replies)
        left = [i for i, (_, more) in zip(left, replies, strict=True) if more]
    producer.counts.cancelled += done
    return done


def reschedule_key(
    producer: Producer, topic: str, key: object, by_ms: int | None, to: DueSpec | None
) -> Op[int]:
    """Move every pending job of `key` by `by_ms` from its due time as read, or to `to`;
    how many jobs moved."""
    found = yield from _found(producer, topic, key)
    calls = []
    for keys, by_id in found:
        for job_id, row in by_id.items():
            due = to if to is not None else DueSpec("at", (row.due_ms or 0) + (by_ms or 0))
            calls.append(enqueue.reschedule(keys, job_id, due, _guard(row)))
    moved = 0
    for i in range(0, len(calls), ACT_BATCH):
        moved += sum(placed is not None for placed in (yield calls[i : i + ACT_BATCH]))
    return moved


def cancel_call(
    producer: Producer, topic: str, job_id: object, key: object, tree: object = False
) -> Op[Any]:
    """`Client.cancel`'s operation: of one job (a bool), of a key's jobs or of a job's tree
    (a count)."""
    if (job_id is None) == (key is None):
        raise InvalidArgumentError("key", "cancel takes a job_id or a key=, one of them")
    if not isinstance(tree, bool):
        raise InvalidArgumentError("tree", f"tree must be a bool, got {tree!r:.40}")
    if key is not None:
        if tree:
            raise InvalidArgumentError("tree", "tree=True goes with a job_id, not key=")
        return cancel_key(producer, topic, key)
    if tree:
        return trees.cancel_tree(producer, topic, str(job_id))
    return producer.cancel(topic, str(job_id))


def reschedule_call(
    producer: Producer,
    topic: str,
    job_id: object,
    delay: Delay | None,
    at: At | None,
    key: object,
    by: object,
    to: At | None,
    tree: object = False,
) -> Op[Any]:
    """`Client.reschedule`'s operation: one job to `delay` or `at` (a bool), or a key's jobs
    or a job's tree (``tree=True``) `by` a shift (seconds or a timedelta, either sign) or
    `to` a time (a count)."""
    if not isinstance(tree, bool):
        raise InvalidArgumentError("tree", f"tree must be a bool, got {tree!r:.40}")
    if tree and key is not None:
        raise InvalidArgumentError("tree", "tree=True goes with a job_id, not key=")
    if key is None and not tree:
        if by is not None or to is not None:
            name = "by" if by is not None else "to"
            raise InvalidArgumentError(
                name, f"{name} goes with key= or tree=True; a job by id takes delay or at"
            )
        if job_id is None:
            raise InvalidArgumentError("job_id", "reschedule takes a job_id or a key=, one of them")
        return producer.reschedule(topic, str(job_id), delay, at)
    if (job_id is None) == (key is None):
        what = "tree=True takes the job_id of the tree's root" if tree else "a job_id or a key="
        raise InvalidArgumentError(
            "key" if key is not None else "job_id", f"reschedule takes {what}"
        )
    whose = "a tree's" if tree else "a key's"
    if delay is not None or at is not None:
        name = "delay" if delay is not None else "at"
        raise InvalidArgumentError(
            name, f"{whose} jobs move by= (a shift) or to= (a time), not {name}"
        )
    if (by is None) == (to is None):
        raise InvalidArgumentError(
            "by", f"{whose} jobs move by= (seconds or a timedelta, either sign) or to= (a time)"
        )
    by_ms = shift_of(by, None, name="by", alias="by")
    if by_ms is not None:
        int_in("by", by_ms, -MAX_SHIFT_MS, MAX_SHIFT_MS)
    due = None
    if to is not None:
        due = DueSpec("at", at_ms(to, "to", latest_ms=latest_at_ms(producer.clock.now_ms())))
    if tree:
        return trees.reschedule_tree(
            producer, topic, str(job_id), due or DueSpec("shift", by_ms or 0)
        )
    return reschedule_key(producer, topic, key, by_ms, due)
