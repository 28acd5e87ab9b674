"""Jobs by state (sans-I/O): a page of one state's list of a topic (`wheelq.core.job_list`),
merged from every place that holds rows of that state, in one order, and resumed from a
cursor by key (docs/architecture.md, "Job lists").

The places (sources) are each shard's sorted set (pending), each shard's index of pending
retries (retrying: sorted by due time, or, when too large to sort in one call, the sorted
set read past its first attempts), and each consumer group of each shard's streams (ready, running,
succeeded, failed; ready counts a stream with no group at all as one source), and for ready,
after every stream's entries, each shard's due line (jobs due and not fired yet). Every source
reads in its list's order from the page's start key, so one merge gives the page: a row is
safe to answer once no source that may still hold rows has read past it (the frontier).
Rows a source reads but the state does not hold (a retry in the sorted set, an attempt that
failed in the succeeded list) are read past; a page reads at most `READ_BUDGET` rows, and
says where it stopped in `next`.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from wheelq.admin.dead_letters import dead_letters
from wheelq.core.follow import WAIT_DUE_MS
from wheelq.core.history import SEPARATOR, read_record
from wheelq.core.job import DeadLetter, Envelope, Field, entry_ms, entry_order
from wheelq.core.job_list import (
    LINE_LANE,
    LINE_MS,
    MAX_LIST_LIMIT,
    PREVIEW_CHARS,
    JobFilter,
    JobPage,
    ListedJob,
    ListState,
    SortKey,
    decode_cursor,
    encode_cursor,
    list_state,
    stored_priority,
)
from wheelq.core.keys import ShardKeys, all_shards
from wheelq.core.payload import payload_text, read_payload
from wheelq.core.process import Held, held_by_workers, start_of
from wheelq.errors import UnknownTopicError, int_in
from wheelq.producer import by_key
from wheelq.producer.operations import Op, Producer
from wheelq.store import groups as g
from wheelq.store import job_lists as lists
from wheelq.store import processes as processes_store
from wheelq.store import topics
from wheelq.store.groups import GROUP_LANES
from wheelq.store.streams import Entry

READ_BUDGET = 10_000
"""Rows one page may read (its own and those it reads past) before it answers."""
MAX_CHUNK = 1000
"""Rows one source reads in one round at most: a round reads what the page still needs
from each source, and twice that each further round (rows of other states were read past)."""

Keyed = tuple[SortKey, ListedJob, bytes | None]
"""A row with its key and its stored payload: the preview is made only for the rows a
page answers."""


@dataclass(slots=True)
class Read:
    """What one source read in one round."""

    rows: list[Keyed] = field(default_factory=list)
    """The rows the state holds, with their keys."""
    last: SortKey | None = None
    """The key of the last row read (kept or not), or, for a pending page the far tier's
    bound cut short, the key it goes on from (past its last row); None when it read none."""
    more: bool = False
    """It read a full count: more may follow `last`."""
    scanned: int = 0


Reader = Callable[[SortKey | None, int], Op[list[Read]]]
"""Reads every source from after a key (None: from the start), up to a count each."""


def list_jobs(
    producer: Producer,
    topic: str,
    state: object,
    match: JobFilter,
    limit: int = 50,
    cursor: str | None = None,
) -> Op[JobPage]:
    """A page of the topic's jobs in `state` that `match` keeps, after `cursor` (a page's
    `next`)."""
    listed = list_state(state)
    match.check(listed)
    int_in("limit", limit, 1, MAX_LIST_LIMIT)
    after = None if cursor is None else decode_cursor(cursor, topic, listed)
    if listed is ListState.DEAD:
        ref = None if after is None else str(after[0])
        return (yield from dead_page(producer, topic, limit, ref, match))
    return (yield from _page(producer, topic, listed, match, limit, after))


def _page(
    producer: Producer,
    topic: str,
    state: ListState,
    match: JobFilter,
    limit: int,
    after: SortKey | None,
) -> Op[JobPage]:
    """A page of `state`'s list after `after` (checked arguments; not dead: `dead_page`)."""
    shards = yield from producer.shard_count(topic, create=False)
    if shards is None:
        raise UnknownTopicError(topic)
    if match.empty():
        return JobPage()
    views = all_shards(topic, shards)
    read: Reader
    if match.key is not None and state in (ListState.PENDING, ListState.AWAITING,
                                           ListState.RETRYING):  # fmt: skip
        read = _keyed_reader(views, match, state)
    elif state in (ListState.PENDING, ListState.AWAITING):
        read = _pending_reader(views, match, state)
    elif state is ListState.RETRYING:
        read = _retrying_reader(views, match)
    else:
        sources = yield from _group_sources(topic, shards, state, match.group)
        read = _fired_reader(topic, state, sources, producer.clock.now_ms())
        if state is ListState.READY:
            read = _with_line(read, views, match)
    if match.priority is not None or match.key is not None:
        read = _of_priority(read, match)
    descending = state in (ListState.SUCCEEDED, ListState.FAILED)
    return (yield from _merged(topic, state, read, after, limit, descending))


def _merged(
    topic: str,
    state: ListState,
    read: Reader,
    after: SortKey | None,
    limit: int,
    descending: bool,
) -> Op[JobPage]:
    page = JobPage()
    budget = READ_BUDGET
    rounds = 0
    while True:
        reads = yield from read(after, min(MAX_CHUNK, (limit - len(page)) << rounds))
        rounds += 1
        busy = [r.last for r in reads if r.more and r.last is not None]
        frontier = (max(busy) if descending else min(busy)) if busy else None
        rows = sorted((row for r in reads for row in r.rows), key=lambda row: row[0])
        if descending:
            rows.reverse()
        for key, job, payload in rows:
            if frontier is not None and (key < frontier if descending else key > frontier):
                break  # a source that may hold rows before it has not read that far
            page.append(job if payload is None else replace(job, preview=_preview(payload)))
            if len(page) == limit:
                page.next = encode_cursor(topic, state, key)
                return page
        if frontier is None:
            return page  # every source read to its end
        after = frontier
        budget -= sum(r.scanned for r in reads)
        if budget <= 0:
            page.next = encode_cursor(topic, state, frontier)
            return page


def _of_priority(read: Reader, match: JobFilter) -> Reader:
    """`read` keeping the rows of `match`'s priority: the others are read past, as rows of
    another state are (a source's `last` and `more` stay what it read)."""

    def kept(after: SortKey | None, count: int) -> Op[list[Read]]:
        reads = yield from read(after, count)
        for r in reads:
            r.rows = [row for row in r.rows if match.keeps(row[1])]
        return reads

    return kept


def _preview(payload: bytes | None) -> str | None:
    if payload is None:
        return None
    try:
        return payload_text(read_payload(payload), PREVIEW_CHARS)
    except Exception:  # msgpack raises several unrelated types
        return "(undecodable)"


def _stored_job(
    topic: str, state: ListState, keys: ShardKeys, row: lists.StoredRow
) -> tuple[ListedJob, Envelope | None]:
    """A pending job or retry read by a list script, and its envelope (None: too large to
    read in a list, or not one)."""
    member = row.member.decode("utf-8", "replace")
    job_id, _, rest = member.partition(SEPARATOR)
    try:
        env = None if row.envelope is None else Envelope.unpack(row.envelope)
    except ValueError:
        env = None
    group = (env.group if env is not None else rest.partition(SEPARATOR)[0]) or None
    return ListedJob(
        id=job_id,
        topic=topic,
        state=state,
        shard=keys.shard,
        due_ms=None if state is ListState.AWAITING else row.due_ms,
        attempt=None if env is None else env.attempt,
        max_attempts=None if env is None else env.max_attempts,
        enqueued_ms=None if env is None else env.enqueued_ms,
        payload_bytes=row.size if env is None else len(env.payload),
        group=group,
        priority=None if env is None else env.priority,
        key=None if env is None else env.key or None,
    ), env


def _is_retry(row: lists.StoredRow, env: Envelope | None) -> bool:
    """`JobState`'s rule, a pending attempt after the first; without the envelope, what the
    index of pending retries says."""
    return env.attempt > 1 if env is not None else row.retry


def _pending_reader(views: Sequence[ShardKeys], match: JobFilter, state: ListState) -> Reader:
    """Each shard's pending jobs (not its retries) by due time, the sorted set's and the far
    tier's merged; those awaiting (all due at `WAIT_DUE_MS`) are the AWAITING list's."""
    low: int | None = WAIT_DUE_MS
    high: int | None = None
    if state is not ListState.AWAITING:
        low, high = match.due_after_ms, min(match.due_before_ms or WAIT_DUE_MS, WAIT_DUE_MS)

    def read(after: SortKey | None, count: int) -> Op[list[Read]]:
        start = None if after is None else (int(after[0]), bytes(after[1]))
        page = lists.DuePage(low, high, start, count)
        pages = yield [lists.pending_page(k, page) for k in views]
        out = []
        for keys, page in zip(views, pages, strict=True):
            # a page cut short by the far tier's bound has its next key past its last row
            r = Read(last=page.next, more=page.next is not None)
            r.scanned = len(page.rows) + page.passed
            for row in page.rows:
                assert row.due_ms is not None
                key: SortKey = (row.due_ms, row.member)
                job, env = _stored_job(keys.topic, state, keys, row)
                if not _is_retry(row, env):
                    r.rows.append((key, job, None if env is None else env.payload))
            out.append(r)
        return out

    return read


def _keyed_reader(views: Sequence[ShardKeys], match: JobFilter, state: ListState) -> Reader:
    """The pending (or retrying) jobs of `match`'s key, through the key index: each round
    reads the key's every job on every shard (`lists.key_jobs`: O(the key's jobs), whatever
    the shards hold besides) and answers those after the page's start, in (due, member)
    order; a job due and waiting on the line is ready, not pending."""

    def read(after: SortKey | None, count: int) -> Op[list[Read]]:
        found = yield from by_key.key_rows(views, str(match.key))
        out = []
        for keys, rows in zip(views, found, strict=True):
            kept = []
            for row in rows:
                if row.waiting or row.due_ms is None:
                    continue
                if (row.due_ms >= WAIT_DUE_MS) is not (state is ListState.AWAITING):
                    continue  # awaiting: the AWAITING list's alone
                if state is not ListState.AWAITING and not match.due_in(row.due_ms):
                    continue
                key: SortKey = (row.due_ms, row.member)
                if after is not None and key <= after:
                    continue
                job, env = _stored_job(keys.topic, state, keys, row)
                if _is_retry(row, env) is (state is ListState.RETRYING):
                    kept.append((key, job, None if env is None else env.payload))
            kept.sort(key=lambda row: row[0])
            r = Read(rows=kept[:count], scanned=len(rows))
            if len(kept) > count:
                r.last, r.more = kept[count - 1][0], True
            out.append(r)
        return out

    return read


def _retrying_reader(views: Sequence[ShardKeys], match: JobFilter) -> Reader:
    """Each shard's pending retries by due time: its index of pending retries sorted whole
    (`lists.retrying_by_due`), or, once it holds too many for one call, the sorted set
    walked by due time with only its retries kept (`lists.pending_page`)."""
    walked: set[int] = set()  # the shards whose index is too large to sort

    def page_of(i: int, start: tuple[int, bytes] | None, count: int) -> Any:
        page = lists.DuePage(match.due_after_ms, match.due_before_ms, start, count)
        if i in walked:
            return lists.pending_page(views[i], page)
        return lists.retrying_by_due(views[i], page)

    def read(after: SortKey | None, count: int) -> Op[list[Read]]:
        start = None if after is None else (int(after[0]), bytes(after[1]))
        pages: list[lists.PendingPage | None] = yield [
            page_of(i, start, count) for i in range(len(views))
        ]
        too_many = [i for i, page in enumerate(pages) if page is None]
        if too_many:
            walked.update(too_many)
            again = yield [page_of(i, start, count) for i in too_many]
            for i, page in zip(too_many, again, strict=True):
                pages[i] = page
        found: list[tuple[int, SortKey, ListedJob, bytes | None]] = []
        out = []
        for i, (keys, page) in enumerate(zip(views, pages, strict=True)):
            assert page is not None
            r = Read(last=page.next, more=page.next is not None)
            r.scanned = len(page.rows) + page.passed
            for row in page.rows:
                if row.due_ms is None or not row.retry:
                    continue  # a first attempt, read past in the sorted set
                job, env = _stored_job(keys.topic, ListState.RETRYING, keys, row)
                if not _is_retry(row, env):
                    continue
                if match.group is not None and job.group != match.group:
                    continue
                key: SortKey = (row.due_ms, row.member)
                found.append((i, key, job, None if env is None else env.payload))
            out.append(r)
        pairs_of: list[list[tuple[str, str]]] = [[] for _ in views]
        for i, _, job, _ in found:
            if job.group:
                pairs_of[i].append((job.id or "", job.group))
        calls = [
            c for i, pairs in enumerate(pairs_of) if pairs for c in lists.records(views[i], pairs)
        ]
        replies = iter((yield calls) if calls else [])
        records: dict[tuple[int, str, str], bytes | None] = {}
        for i, pairs in enumerate(pairs_of):
            if pairs:
                new, old = next(replies), next(replies)
                for pair, a, b in zip(pairs, new, old, strict=True):
                    records[(i, *pair)] = a if a is not None else b
        for i, key, job, payload in found:
            rec = read_record(records.get((i, job.id or "", job.group or "")))
            if rec is not None and rec.kind == "R":
                job_now = replace(job, finished_ms=rec.at_ms, error=rec.error or None)
            else:
                job_now = job
            out[i].rows.append((key, job_now, payload))
        return out

    return read


def _with_line(fired: Reader, views: Sequence[ShardKeys], match: JobFilter) -> Reader:
    """The ready list's reader: the streams' entries (`fired`), then each shard's due line in
    the order its jobs will enter the stream (`lists.held_page`). A line row's key sorts after
    every entry (`LINE_MS`), by its place on its line, then shard; the lines are read only
    once no stream may hold more rows (before that, the merge could not answer them)."""

    def read(after: SortKey | None, count: int) -> Op[list[Read]]:
        out = yield from fired(after, count)
        if any(r.more for r in out):
            return out
        starts = [_line_start(keys.shard, after) for keys in views]
        pages = yield [lists.held_page(k, p, count) for k, p in zip(views, starts, strict=True)]
        for keys, start, page in zip(views, starts, pages, strict=True):
            r = Read(more=page.more, scanned=len(page.rows))
            for place, row in enumerate(page.rows, start):
                r.last = (LINE_MS, place, keys.shard, LINE_LANE, "")
                job, env = _stored_job(keys.topic, ListState.READY, keys, row)
                if match.group is None or job.group in (None, match.group):
                    payload = None if env is None else env.payload
                    r.rows.append((r.last, replace(job, waiting=True), payload))
            out.append(r)
        return out

    return read


def _line_start(shard: int, after: SortKey | None) -> int:
    """The first place on `shard`'s due line whose row keys after `after`."""
    if after is None or after[0] < LINE_MS:
        return 0
    place, of_shard = int(after[1]), int(after[2])
    return place if shard > of_shard else place + 1


@dataclass(frozen=True, slots=True)
class GroupSource:
    """A consumer group of one shard's stream (group "": a stream no group reads yet)."""

    keys: ShardKeys
    lane: int
    """Its stream's place in `GROUP_LANES`."""
    group: str
    last_delivered: str
    pending: int

    @property
    def order(self) -> tuple[int, int, str]:
        return (self.keys.shard, self.lane, self.group)


def _group_sources(
    topic: str, shards: int, state: ListState, group: str | None
) -> Op[list[GroupSource]]:
    views = [ShardKeys(topic, shard, lane) for shard in range(shards) for lane in GROUP_LANES]
    exist = yield [topics.exists(view.stream) for view in views]
    views = [view for view, there in zip(views, exist, strict=True) if there]
    listed = (yield [g.stream_groups(view) for view in views]) if views else []
    out = []
    for view, found in zip(views, listed, strict=True):
        lane = GROUP_LANES.index(view.lane)
        if not found and state is ListState.READY and group is None:
            out.append(GroupSource(view, lane, "", "0-0", 0))
        for info in found:
            if group is not None and info.name != group:
                continue
            if state is ListState.RUNNING and info.pending == 0:
                continue
            out.append(GroupSource(view, lane, info.name, info.last_delivered, info.pending))
    return out


def _start(source: GroupSource, after: SortKey | None, state: ListState) -> str | None:
    """Where `source` reads from after `after` (``(id``: exclusive); None: nothing to read.

    Ready entries are those after the group's last delivered one; settled ones (succeeded,
    failed) are at or before it; entries in flight are anywhere up to it."""
    floor = entry_order(source.last_delivered)
    descending = state in (ListState.SUCCEEDED, ListState.FAILED)
    if descending and floor == (0, 0):
        return None  # nothing was ever delivered to it
    if after is None:
        if descending:
            return source.last_delivered
        if state is ListState.READY and source.group:
            return f"({source.last_delivered}"
        return "-"
    at = (int(after[0]), int(after[1]))
    text = f"{at[0]}-{at[1]}"
    place = (int(after[2]), int(after[3]), str(after[4]))
    if descending:
        if at > floor:
            return source.last_delivered
        return text if source.order < place else f"({text}"
    if state is ListState.READY and source.group and at <= floor:
        return f"({source.last_delivered}"
    return text if source.order > place else f"({text}"


def _entry_job(
    topic: str,
    state: ListState,
    source: GroupSource,
    entry_id: str,
    fields: dict[bytes, bytes],
) -> ListedJob:
    def number(name: bytes) -> int | None:
        try:
            return int(fields[name])
        except (KeyError, ValueError):
            return None

    raw_id = fields.get(Field.ID)
    payload = fields.get(Field.PAYLOAD)
    return ListedJob(
        id=None if raw_id is None else raw_id.decode("utf-8", "replace"),
        topic=topic,
        state=state,
        shard=source.keys.shard,
        due_ms=number(Field.DUE),
        attempt=number(Field.ATTEMPT),
        max_attempts=number(Field.MAX_ATTEMPTS),
        enqueued_ms=number(Field.ENQUEUED),
        payload_bytes=None if payload is None else len(payload),
        group=source.group or None,
        entry_id=entry_id,
        lane=source.keys.lane,
        priority=stored_priority(fields.get(Field.PRIORITY)) if raw_id is not None else None,
        key=_text(fields.get(Field.KEY)),
    )


def _fired_reader(
    topic: str, state: ListState, sources: Sequence[GroupSource], now_ms: int
) -> Reader:
    beats: list[Held] = []  # the workers' held entries, read once a page (running)

    def key_of(source: GroupSource, entry_id: str) -> SortKey:
        return (*entry_order(entry_id), *source.order)

    def read(after: SortKey | None, count: int) -> Op[list[Read]]:
        starts = [_start(s, after, state) for s in sources]
        asked = [(s, start) for s, start in zip(sources, starts, strict=True) if start]
        if state is ListState.READY:
            calls: list[Any] = [lists.entries_after(s.keys.stream, st, count) for s, st in asked]
        elif state is ListState.RUNNING:
            calls = [lists.in_flight(s.keys.stream, s.group, st, count) for s, st in asked]
        else:
            calls = [lists.entries_before(s.keys.stream, st, count) for s, st in asked]
        pages = (yield calls) if calls else []
        if state is ListState.RUNNING:
            if not beats and any(pages):
                (found,) = yield [processes_store.live()]
                beats.append(held_by_workers(found.processes))
            known = beats[0] if beats else None
            return (yield from _running(topic, asked, pages, count, now_ms, key_of, known))
        out = []
        settled: list[tuple[Read, GroupSource, list[Entry]]] = []
        for (source, _), entries in zip(asked, pages, strict=True):
            r = Read(more=len(entries) == count, scanned=len(entries))
            if entries:
                r.last = key_of(source, entries[-1][0])
            if state is ListState.READY:
                r.rows = [
                    (
                        key_of(source, e),
                        _entry_job(topic, state, source, e, f),
                        f.get(Field.PAYLOAD),
                    )
                    for e, f in entries
                ]
            else:
                settled.append((r, source, entries))
            out.append(r)
        if settled:
            yield from _settled(topic, state, settled, key_of)
        return out

    return read


def _running(
    topic: str,
    asked: Sequence[tuple[GroupSource, str]],
    pages: Sequence[list[lists.InFlight]],
    count: int,
    now_ms: int,
    key_of: Callable[[GroupSource, str], SortKey],
    held_by_worker: Held | None = None,
) -> Op[list[Read]]:
    calls = [
        c
        for (source, _), held in zip(asked, pages, strict=True)
        for c in lists.entries_by_id(source.keys.stream, [h.entry_id for h in held])
    ]
    found = iter((yield calls) if calls else [])
    out = []
    for (source, _), held in zip(asked, pages, strict=True):
        r = Read(more=len(held) == count, scanned=len(held))
        for h in held:
            r.last = key_of(source, h.entry_id)
            entries = next(found)
            fields = entries[0][1] if entries else {}
            job = _entry_job(topic, ListState.RUNNING, source, h.entry_id, fields)
            since = max(now_ms - h.idle_ms, entry_ms(h.entry_id))
            held_by = replace(job, consumer=h.consumer, since_ms=since, deliveries=h.deliveries)
            key = (h.consumer, source.group, topic, source.keys.shard, h.entry_id)
            start = None if held_by_worker is None else start_of(held_by_worker, key)
            if start is not None:  # as its worker's last beat says
                held_by = replace(held_by, started_ms=start.started_ms, read_ahead=start.read_ahead)
            r.rows.append((r.last, held_by, fields.get(Field.PAYLOAD)))
        out.append(r)
    return out


def _settled(
    topic: str,
    state: ListState,
    settled: Sequence[tuple[Read, GroupSource, list[Entry]]],
    key_of: Callable[[GroupSource, str], SortKey],
) -> Generator[list[Any], list[Any], None]:
    """Keep each delivered entry whose group's record names it with the state's outcome."""
    asked = []
    for r, source, entries in settled:
        pairs = [
            ((f.get(Field.ID) or b"").decode("utf-8", "replace"), source.group) for _, f in entries
        ]
        asked.append((r, source, entries, pairs))
    calls = [c for _, source, _, pairs in asked if pairs for c in lists.records(source.keys, pairs)]
    replies = iter((yield calls) if calls else [])
    kinds = ("S",) if state is ListState.SUCCEEDED else ("R", "D")
    for r, source, entries, pairs in asked:
        if not pairs:
            continue
        new, old = next(replies), next(replies)
        for (entry_id, fields), a, b in zip(entries, new, old, strict=True):
            rec = read_record(a if a is not None else b)
            if rec is None or rec.entry != entry_id or rec.kind not in kinds:
                continue  # in flight again, or a later attempt's record
            job = replace(
                _entry_job(topic, state, source, entry_id, fields),
                finished_ms=rec.at_ms,
                duration_ms=rec.duration_ms if rec.kind == "S" else None,
                error=rec.error or None,
                reason=rec.reason or None,
            )
            r.rows.append((key_of(source, entry_id), job, fields.get(Field.PAYLOAD)))


def dead_page(
    producer: Producer, topic: str, limit: int, after: str | None, match: JobFilter
) -> Op[JobPage]:
    """A page of the dead list after the ref `after` (`dead_letters`' own pages)."""
    letters = yield from dead_letters(producer, topic, limit, after, match.reason, match.group)
    # a priority filter keeps a page's letters of it (a page may hold fewer than its limit)
    page = JobPage(job for d in letters if match.keeps(job := _dead_job(d)))
    if letters.next is not None:
        page.next = encode_cursor(topic, ListState.DEAD, (letters.next,))
    return page


def _dead_job(d: DeadLetter) -> ListedJob:
    payload = d.fields.get("payload")
    return ListedJob(
        id=d.job_id,
        topic=d.topic,
        state=ListState.DEAD,
        shard=d.shard,
        due_ms=_int(d.fields.get("due")),
        attempt=d.attempt,
        max_attempts=d.max_attempts,
        enqueued_ms=_int(d.fields.get("enqueued")),
        preview=_preview(payload),
        payload_bytes=None if payload is None else len(payload),
        group=d.group or None,
        entry_id=d.source_entry or None,
        finished_ms=d.dead_ms,
        error=d.error or None,
        reason=d.reason,
        ref=d.ref,
        priority=stored_priority(d.fields.get("priority")),
        key=_text(d.fields.get("key")),
    )


def _text(value: bytes | None) -> str | None:
    return None if not value else value.decode("utf-8", "replace")


def _int(value: bytes | None) -> int | None:
    try:
        return None if value is None else int(value)
    except ValueError:
        return None
