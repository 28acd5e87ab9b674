"""Actions on many jobs at once (sans-I/O): select the jobs a filter matches (or the ids
named) into a selection, count them, and act on the selection a batch at a time, each job
only while it is still as it was selected (`wheelq.core.bulk_actions` has the design).
Every Redis call is one bounded batch: a page of a list, a ZADD of a page's members, a
ZMSCORE of a batch, a short script per job.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from wheelq.admin.job_lists import dead_page
from wheelq.core.bulk_actions import (
    BATCH,
    SELECTION_TTL_MS,
    BulkAction,
    BulkOutcome,
    Selected,
    Selection,
    bulk_action,
)
from wheelq.core.due import (
    MAX_AT_MS,
    MAX_SHIFT_MS,
    NOW,
    At,
    DueSpec,
    at_ms,
    latest_at_ms,
)
from wheelq.core.follow import WAIT_DUE_MS
from wheelq.core.history import SEPARATOR
from wheelq.core.job import Envelope, parse_ref
from wheelq.core.job_list import (
    JobFilter,
    ListedJob,
    ListState,
    SortKey,
    decode_cursor,
    list_state,
)
from wheelq.core.keys import ShardKeys, shard_of, validate_job_id
from wheelq.errors import (
    InvalidArgumentError,
    SelectionGoneError,
    UnknownTopicError,
    WheelqError,
    int_in,
)
from wheelq.producer import by_key
from wheelq.producer.operations import Op, Producer
from wheelq.store import dead_letters as dead
from wheelq.store import enqueue
from wheelq.store import job_lists as lists
from wheelq.store import selections as store
from wheelq.store.call import Call

MAX_NAMED = 10_000
"""Ids or refs one bulk call may name (more: select them by filter)."""
SELECT_PAGE = 500
"""Rows a selection reads a page (each shard's part one short call: ids, due times and
stamps)."""
Progress = Callable[[int, int], None]
"""Told (jobs reached, jobs selected) after each batch of an act."""


@dataclass(frozen=True, slots=True)
class Target:
    """The jobs a bulk action is to take, as `Admin.bulk` was given them: those of `state`
    that `match` keeps, the `ids` or `refs` named (those still in `state`; refs alone mean
    dead letters), or a dry run's `selection` (alone: it stands for its jobs)."""

    state: object
    match: JobFilter
    ids: Sequence[str] | None
    refs: Sequence[str] | None
    selection: str | None

    def chosen(self, topic: str) -> tuple[ListState, JobFilter, Selection | None]:
        """The state and filter of the jobs, and the selection they are (None: to select),
        else InvalidArgumentError naming what does not fit."""
        given = (("ids", self.ids), ("refs", self.refs), ("selection", self.selection))
        ways = [name for name, value in given if value is not None]
        if len(ways) > 1:
            raise InvalidArgumentError(ways[1], f"pass one of {' and '.join(ways)}, not both")
        if self.selection is not None:
            sel = Selection.of(self.selection, topic)
            return sel.state, JobFilter(), sel
        if self.state is None and self.refs is None:
            raise InvalidArgumentError(
                "filter",
                "a bulk action needs a filter (at least its state), ids, refs or a selection",
            )
        listed = list_state("dead" if self.state is None else self.state)
        self.match.check(listed)
        return listed, self.match, None


def bulk(
    producer: Producer,
    topic: str,
    action: object,
    target: Target,
    dry_run: bool,
    at: At | None,
    shift_ms: int | None,
    max_jobs: int | None,
    progress: Progress | None,
) -> Op[BulkOutcome]:
    """Select (a dry run stops there) and act; see `Admin.bulk`."""
    listed, match, sel = target.chosen(topic)
    found = bulk_action(action, listed)
    due = _due(found, at, shift_ms, producer.clock.now_ms())
    if max_jobs is not None:
        int_in("max_jobs", max_jobs, 1, 10**9)
    if sel is None:
        named = _named(listed, target.ids, target.refs)
        sel = yield from select(producer, topic, listed, match, named)
        if dry_run:
            token = sel.token() if sel.matched else None
            return BulkOutcome(found, listed, True, sel.matched, selection=token)
    else:
        yield from _check_open(topic, sel)
    if dry_run:
        left = yield from _remaining(producer, topic, sel)
        return BulkOutcome(
            found, listed, True, sel.matched, remaining=left, selection=target.selection
        )
    return (yield from act(producer, topic, sel, found, due, shift_ms, max_jobs, progress))


def _due(action: BulkAction, at: At | None, shift_ms: int | None, now_ms: int) -> DueSpec | None:
    """The due time a reschedule moves jobs to (None: by `shift_ms`); NOW for run_now."""
    if action is BulkAction.RUN_NOW:
        if at is not None or shift_ms is not None:
            raise InvalidArgumentError("at", "run_now takes neither at nor shift_ms")
        return NOW
    if action is not BulkAction.RESCHEDULE:
        if at is not None or shift_ms is not None:
            name = "at" if at is not None else "shift_ms"
            raise InvalidArgumentError(name, f"{name} goes with reschedule, not {action.value}")
        return None
    if (at is None) == (shift_ms is None):
        raise InvalidArgumentError(
            "at", "reschedule takes at (a time) or shift_ms (ms), one of them"
        )
    if at is not None:
        return DueSpec("at", at_ms(at, latest_ms=latest_at_ms(now_ms)))
    int_in("shift_ms", shift_ms, -MAX_SHIFT_MS, MAX_SHIFT_MS)
    return None


def _named(
    state: ListState, ids: Sequence[str] | None, refs: Sequence[str] | None
) -> list[str] | None:
    given = ids if ids is not None else refs
    if given is None:
        return None
    name = "ids" if ids is not None else "refs"
    if isinstance(given, str) or not 0 < len(given) <= MAX_NAMED:
        raise InvalidArgumentError(name, f"{name} must be a list of 1-{MAX_NAMED} {name}")
    if (state is ListState.DEAD) != (refs is not None):
        raise InvalidArgumentError(
            name, "dead letters are named by refs; pending and retrying jobs by ids"
        )
    for one in given:
        if ids is not None:
            validate_job_id(one)
        else:
            try:
                parse_ref(one)
            except InvalidArgumentError as exc:
                raise InvalidArgumentError("refs", str(exc)) from None
    return list(dict.fromkeys(given))


def select(
    producer: Producer,
    topic: str,
    state: ListState,
    match: JobFilter,
    named: list[str] | None,
) -> Op[Selection]:
    """Copy the jobs `state`'s list holds under `match` (or the `named` ones still in
    `state`) into a new selection, a page at a time; the selection, with its count."""
    shards = yield from producer.shard_count(topic, create=False)
    if shards is None:
        raise UnknownTopicError(topic)
    sel = Selection.new(topic, state)
    count = 0
    if named is not None:
        for i in range(0, len(named), BATCH):
            members = yield from _still(topic, shards, state, named[i : i + BATCH])
            count += yield from _remember(topic, sel, members)
    elif state is ListState.DEAD:
        after: SortKey | None = None
        while True:
            ref = None if after is None else str(after[0])
            page = yield from dead_page(producer, topic, SELECT_PAGE, ref, match)
            count += yield from _remember(topic, sel, [_member(row) for row in page])
            if page.next is None:
                break
            after = decode_cursor(page.next, topic, state)
    else:
        count = yield from _select_scheduled(topic, shards, sel, match)
    if count:
        yield [store.open_mark(topic, sel.name, SELECTION_TTL_MS)]
    return dataclasses.replace(sel, matched=count)


def _select_scheduled(topic: str, shards: int, sel: Selection, match: JobFilter) -> Op[int]:
    """Select the pending or retrying jobs `match` takes, each shard paged on its own (a
    selection needs no order across shards: each row is read once), every unfinished shard
    in one round trip a page. Rows come bare (ids, due times and stamps) unless a group filter
    needs a retry's envelope."""
    envelope_max = 0 if match.group is None else lists.ENVELOPE_MAX
    views = [ShardKeys(topic, shard) for shard in range(shards)]
    if match.key is not None:  # through the key index: O(the key's jobs)
        found = yield from by_key.key_rows(views, match.key, stamps=True)
        return (
            yield from _remember(
                topic,
                sel,
                [
                    (i, *picked)
                    for i, rows in enumerate(found)
                    for row in rows
                    if not row.waiting and (picked := _pick(sel.state, match, row))
                ],
            )
        )
    after: dict[int, Any] = dict.fromkeys(range(shards))
    count = 0

    def due_page(start: tuple[int, bytes] | None) -> lists.DuePage:
        low, high = match.due_after_ms, match.due_before_ms
        if sel.state is ListState.AWAITING:  # all due at WAIT_DUE_MS, after every other
            low, high = WAIT_DUE_MS, None
        elif sel.state is ListState.PENDING:
            high = min(high or WAIT_DUE_MS, WAIT_DUE_MS)
        return lists.DuePage(low, high, start, SELECT_PAGE, envelope_max)

    while after:
        shards_now = list(after)
        if sel.state is not ListState.RETRYING:
            calls: list[Call[Any]] = [
                lists.pending_page(views[i], due_page(after[i]), stamps=True) for i in shards_now
            ]
        else:
            calls = [
                lists.retrying_page(views[i], after[i], SELECT_PAGE, envelope_max, stamps=True)
                for i in shards_now
            ]
        pages = yield calls
        members: list[Member] = []
        for i, page in zip(shards_now, pages, strict=True):
            if sel.state is not ListState.RETRYING:  # a page may be short and have a next
                rows, following = page.rows, page.next
            else:
                more, rows = page
                following = rows[-1].member if more and rows else None
            members += [(i, *picked) for row in rows if (picked := _pick(sel.state, match, row))]
            if following is None:
                del after[i]
            else:
                after[i] = following
        count += yield from _remember(topic, sel, members)
    return count


def _pick(
    state: ListState, match: JobFilter, row: lists.StoredRow
) -> tuple[str, int, str | None] | None:
    """(job id, due ms, stamp) of a row the selection takes, else None."""
    if row.due_ms is None:
        return None  # a retry that fired or was cancelled since the index was read
    if state in (ListState.PENDING, ListState.AWAITING):
        if row.retry or (row.due_ms >= WAIT_DUE_MS) is not (state is ListState.AWAITING):
            return None  # a retry, or the other of the two lists
        if state is ListState.PENDING and not match.due_in(row.due_ms):
            return None
        return row.member.decode("utf-8", "replace"), row.due_ms, row.stamp
    if not match.due_in(row.due_ms):
        return None
    member = row.member.decode("utf-8", "replace")
    job_id, _, rest = member.partition(SEPARATOR)
    if match.group is not None:
        try:
            group = (
                Envelope.unpack(row.envelope).group if row.envelope else rest.split(SEPARATOR)[0]
            )
        except ValueError:
            return None
        if group != match.group:
            return None
    return job_id, row.due_ms, row.stamp


Member = tuple[int, str, int, str | None]
"""A selection's row: (shard, member, score, stamp); a dead letter's score is 0 and it has
no stamp."""


def _member(row: ListedJob) -> Member:
    """A listed dead letter as a selection's row."""
    assert row.ref is not None
    shard, entry_id = parse_ref(row.ref)
    return shard, entry_id, 0, None


def _remember(topic: str, sel: Selection, members: Sequence[Member]) -> Op[int]:
    """Add rows to the selection; how many were new to it (two retries of one job are one
    member: its last row is kept)."""
    by_shard: dict[int, list[tuple[str, int, str | None]]] = defaultdict(list)
    for shard, member, score, stamp in members:
        by_shard[shard].append((member, score, stamp))
    calls: list[Call[Any]] = []
    adds = []  # where each shard's ZADD is among the calls: its reply counts the new members
    for shard, rows in by_shard.items():
        adds.append(len(calls))
        calls += store.remember(ShardKeys(topic, shard), sel.name, rows, SELECTION_TTL_MS)
    replies = (yield calls) if calls else []
    return sum(replies[i] for i in adds)


def _still(topic: str, shards: int, state: ListState, named: Sequence[str]) -> Op[list[Member]]:
    """The named jobs (or dead letters) still in `state`, as selection rows."""
    by_shard: dict[int, list[str]] = defaultdict(list)
    for one in named:
        if state is ListState.DEAD:
            shard, entry_id = parse_ref(one)
            if shard < shards:
                by_shard[shard].append(entry_id)
        else:
            by_shard[shard_of(one, shards)].append(one)
    out: list[Member] = []
    for shard, members in by_shard.items():
        keys = ShardKeys(topic, shard)
        if state is ListState.DEAD:
            there = yield store.dead_exists(keys, members)
            out += [(shard, m, 0, None) for m, ok in zip(members, there, strict=True) if ok]
        else:
            kept = yield from _in_state(keys, state, members)
            out += [(shard, member, due, stamp) for member, due, stamp in kept]
    return out


def _in_state(
    keys: ShardKeys, state: ListState, members: Sequence[str]
) -> Op[list[tuple[str, int, str]]]:
    """Those of `members` (job ids) pending or retrying (`state`) now, with their due time
    and stamp (a retry stored under alias members only: its first alias's)."""
    calls: list[Call[Any]] = [store.due_times(keys, members), store.in_retry_index(keys, members)]
    if state is ListState.RETRYING:
        calls += [store.alias_retry(keys, m) for m in members]
    found, indexed, *aliases = yield calls
    out = []
    via: dict[str, str] = {}  # alias member -> its job id
    retrying = state is ListState.RETRYING
    for i, member in enumerate(members):
        now = found[i]
        awaiting = now is not None and now[0] >= WAIT_DUE_MS
        if now is not None and indexed[i] == retrying and awaiting is (state is ListState.AWAITING):
            out.append((member, *now))  # pending (or awaiting, as asked): not a retry
        elif retrying and aliases[i] is not None:
            via[aliases[i]] = member
    if via:
        (at_aliases,) = yield [store.due_times(keys, list(via))]
        out += [(via[a], *now) for a, now in zip(via, at_aliases, strict=True) if now is not None]
    return out


def act(
    producer: Producer,
    topic: str,
    sel: Selection,
    action: BulkAction,
    due: DueSpec | None,
    shift_ms: int | None,
    max_jobs: int | None,
    progress: Progress | None,
) -> Op[BulkOutcome]:
    """Act on the selection a batch at a time, each job while it is still in its state."""
    shards = yield from producer.shard_count(topic, create=False)
    if shards is None:
        raise UnknownTopicError(topic)
    acted = changed = skipped = reached = 0
    for shard in range(shards):
        keys = ShardKeys(topic, shard)
        while max_jobs is None or reached < max_jobs:
            count = BATCH if max_jobs is None else min(BATCH, max_jobs - reached)
            taken, *_ = yield store.take(keys, sel.name, count, SELECTION_TTL_MS)
            if not taken:
                break
            members = [member for member, _ in taken]
            done, moved_on, left = yield from _act_batch(keys, sel, action, taken, due, shift_ms)
            acted, changed, skipped = acted + done, changed + moved_on, skipped + left
            yield store.forget(keys, sel.name, members)
            reached += len(members)
            if progress is not None:
                progress(reached, sel.matched)
    remaining = yield from _remaining(producer, topic, sel)
    if not remaining:
        yield [store.close_mark(topic, sel.name)]
    return BulkOutcome(
        action,
        sel.state,
        False,
        sel.matched,
        acted,
        changed,
        skipped,
        remaining,
        sel.token() if remaining else None,
    )


def _check_open(topic: str, sel: Selection) -> Op[None]:
    """InvalidArgumentError naming ``selection`` when it was used up or has expired."""
    (found,) = yield [store.is_open(topic, sel.name, SELECTION_TTL_MS)]
    if not found:
        raise SelectionGoneError(
            "selection was acted on to its end already, or has expired (a selection is kept "
            f"{SELECTION_TTL_MS // 60_000} minutes after its last use): run a dry run again",
        )


def _remaining(producer: Producer, topic: str, sel: Selection) -> Op[int]:
    shards = yield from producer.shard_count(topic, create=False)
    if shards is None:
        raise UnknownTopicError(topic)
    sizes = yield [store.size(ShardKeys(topic, shard), sel.name) for shard in range(shards)]
    return int(sum(sizes))


def _act_batch(
    keys: ShardKeys,
    sel: Selection,
    action: BulkAction,
    taken: Sequence[tuple[str, int]],
    due: DueSpec | None,
    shift_ms: int | None,
) -> Op[tuple[int, int, int]]:
    """(acted, changed, skipped) of one batch of one shard: (member, score) pairs taken from
    the selection."""
    members = [member for member, _ in taken]
    if action is BulkAction.REPLAY:
        ((n, held, refused),) = yield [dead.replay(keys, members)]
        return n, len(members) - n - held - len(refused), held + len(refused)
    if action is BulkAction.PURGE:
        (n,) = yield [dead.purge_dead(keys, members)]
        return n, len(members) - n, 0
    (stamps,) = yield [store.stamps(keys, sel.name, members)]
    retry = sel.state is ListState.RETRYING
    calls: list[Call[Any]] = []
    for (job_id, at), stamp in zip(taken, stamps, strict=True):
        # the script acts only while the job is as selected: the rest are changed
        selected = Selected(retry, at, stamp)
        if action is BulkAction.CANCEL:
            calls.append(_safe(enqueue.cancel(keys, job_id, selected)))
        else:
            to = due if due is not None else DueSpec("at", _shifted(at, shift_ms))
            calls.append(_safe(enqueue.reschedule(keys, job_id, to, selected)))
    replies = yield calls
    # cancel answers whether it removed anything; reschedule where it placed it (None: not
    # pending as selected), and SCHEDULED is 0
    acted = sum(
        1 for r in replies if r is not None and r is not False and not isinstance(r, WheelqError)
    )
    errors = sum(1 for r in replies if isinstance(r, WheelqError))
    return acted, len(members) - acted - errors, errors


def _shifted(at: int, shift_ms: int | None) -> int:
    """A job due at `at` (its due time when selected: it is acted on only while it still is)
    moved by `shift_ms`, within [0, MAX_AT_MS]."""
    assert shift_ms is not None  # reschedule takes at or shift_ms (`_due`)
    return min(max(at + shift_ms, 0), MAX_AT_MS)


def _safe(call: Call[Any]) -> Call[Any]:
    """`call` whose parse answers its error instead of raising it (a malformed job due now
    is skipped, not the end of the batch)."""
    parse = call.parse

    def answer(reply: Any) -> Any:
        try:
            return parse(reply)
        except WheelqError as exc:
            return exc

    return dataclasses.replace(call, parse=answer)
