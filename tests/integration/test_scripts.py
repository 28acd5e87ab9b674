"""Each Lua script called directly on a real server: edge-case KEYS/ARGV and every status code.

Calls go through the `ops` wrappers and `SyncExecutor`, as the library sends them; raw
EVALSHA only where the ARGV must be malformed. Due times are read off the server's TIME,
with margins of seconds where the script reads TIME again, so no test depends on timing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import itertools
import os
import re
import time
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import msgpack
import pytest
import redis
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from redis.client import PubSub

from tests.support.entries import ENQUEUED_MS, ready_fields
from tests.support.scripts import RAW_PAYLOAD, Runner
from tests.support.servers import dedicated_server
from tests.support.waiting import eventually_sync
from wheelq.core.bulk_actions import Selected
from wheelq.core.callback import Callback
from wheelq.core.due import DueSpec
from wheelq.core.history import SEPARATOR
from wheelq.core.ids import make_job_id
from wheelq.core.job import Envelope, Field, parse_note, parse_notes
from wheelq.core.keys import ShardKeys, key_list_key
from wheelq.errors import LeaseLostError, MalformedJobError, ScriptError
from wheelq.store import enqueue, fire, leases, observe, topics
from wheelq.store.call import Call
from wheelq.store.enqueue import JobWrite
from wheelq.store.executor import SyncExecutor
from wheelq.store.fire import EmitResult
from wheelq.store.scripts import Placed, script
from wheelq.testing import ServerBinary

pytestmark = pytest.mark.both_servers  # the Lua scripts, called directly

TOKEN = "node-a:1"
OTHER = "node-b:1"
TTL_MS = 30_000
MINUTE_MS = 60_000
HOUR_MS = 3_600_000


@pytest.fixture
def leader(run: Runner, keys: ShardKeys) -> leases.LeaseAttempt:
    """TOKEN holds the shard's lease (horizon set to TIME by the acquire)."""
    attempt = run(leases.lease_acquire(keys, TOKEN, TTL_MS))
    assert attempt.held and attempt.new
    return attempt


# --- helpers --------------------------------------------------------------------------------


def server_ms(r: redis.Redis) -> int:
    sec, usec = r.time()
    return int(sec) * 1000 + int(usec) // 1000


def env(payload: bytes = b"p", attempt: int = 1, max_attempts: int = 5) -> bytes:
    return Envelope(payload, attempt, max_attempts, ENQUEUED_MS).pack()


def at(ms: int) -> DueSpec:
    return DueSpec("at", ms)


def job(
    job_id: str, due: DueSpec, envelope: bytes | None = None, replace: bool = False
) -> JobWrite:
    return JobWrite(job_id, due, replace, env() if envelope is None else envelope)


def seed_pending(
    r: redis.Redis, keys: ShardKeys, job_id: str, due_ms: int, envelope: bytes
) -> None:
    """Write a pending job as enqueue.lua would, with any due time (even a past one)."""
    r.hset(keys.jobs, job_id, envelope)
    r.zadd(keys.delayed, {job_id: due_ms})


def seeded(r: redis.Redis, keys: ShardKeys, due_in_ms: dict[str, int]) -> int:
    """Pending jobs due `due_in_ms[id]` ms after the server's now (`seed_pending`); now."""
    now = server_ms(r)
    for job_id, offset in due_in_ms.items():
        seed_pending(r, keys, job_id, now + offset, env())
    return now


def score(r: redis.Redis, keys: ShardKeys, job_id: str) -> int | None:
    value = r.zscore(keys.delayed, job_id)
    return None if value is None else int(value)


def entries(r: redis.Redis, keys: ShardKeys) -> list[tuple[int, dict[bytes, bytes]]]:
    """The ready stream as (entry id ms, fields), oldest first."""
    return [(int(eid.split(b"-")[0]), fields) for eid, fields in r.xrange(keys.ready)]


def fired_ids(r: redis.Redis, keys: ShardKeys) -> list[str]:
    return [fields[Field.ID].decode() for _, fields in entries(r, keys)]


def shard_state(r: redis.Redis, keys: ShardKeys) -> dict[str, tuple[bytes, Any]]:
    """Type and full content of every key of the shard, for "nothing changed" checks."""
    state: dict[str, tuple[bytes, Any]] = {}
    for name in ("delayed", "jobs", "ready", "lease", "horizon", "inbox", "spooled"):
        key = getattr(keys, name)
        kind = r.type(key)
        content: Any = {
            b"zset": lambda k: r.zrange(k, 0, -1, withscores=True),
            b"hash": r.hgetall,
            b"stream": r.xrange,
            b"list": lambda k: r.lrange(k, 0, -1),
            b"string": r.get,
        }.get(kind, lambda k: None)(key)
        state[name] = (kind, content)
    return state


def next_published(pubsub: PubSub) -> bytes:
    message = pubsub.get_message(timeout=5)
    assert message is not None, "nothing published on the wake channel within 5 s"
    data: bytes = message["data"]
    return data


def assert_nothing_published(r: redis.Redis, pubsub: PubSub, keys: ShardKeys) -> None:
    """A marker published now must be the next message: the script published nothing before it."""
    r.spublish(keys.wake_channel, b"marker")
    assert next_published(pubsub) == b"marker"


# --- enqueue --------------------------------------------------------------------------------


def test_enqueue_future_at_is_scheduled_with_its_score_and_envelope(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    due = server_ms(redis_sync) + MINUTE_MS
    envelope = env(RAW_PAYLOAD, attempt=2, max_attempts=7)

    assert run(enqueue.enqueue(keys, [job("j1", at(due), envelope)])) == [Placed.SCHEDULED]

    assert redis_sync.zrange(keys.delayed, 0, -1, withscores=True) == [(b"j1", due)]
    assert redis_sync.hgetall(keys.jobs) == {b"j1": envelope}
    assert redis_sync.exists(keys.ready, keys.inbox) == 0


def test_enqueue_delay_is_added_to_server_time(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    before = server_ms(redis_sync)
    assert run(enqueue.enqueue(keys, [job("j1", DueSpec("delay", MINUTE_MS))])) == [
        Placed.SCHEDULED
    ]
    after = server_ms(redis_sync)

    due = score(redis_sync, keys, "j1")
    assert due is not None and before + MINUTE_MS <= due <= after + MINUTE_MS
    assert redis_sync.xlen(keys.ready) == 0


@pytest.mark.parametrize("when", ["delay 0", "at now", "at 10 s ago", "at epoch 1"])
def test_enqueue_due_now_or_past_goes_straight_to_the_stream(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, topic: str, when: str
) -> None:
    before = server_ms(redis_sync)
    due_spec = {
        "delay 0": DueSpec("delay", 0),
        "at now": at(before),
        "at 10 s ago": at(before - 10_000),
        "at epoch 1": at(1),
    }[when]

    placed = run(enqueue.enqueue(keys, [job("j1", due_spec, env(RAW_PAYLOAD, 3, 7))]))
    after = server_ms(redis_sync)

    assert placed == [Placed.FIRED]
    [(entry_ms, fields)] = entries(redis_sync, keys)
    due = int(fields[Field.DUE])
    if due_spec.kind == "delay":
        assert before <= due <= after
    else:
        assert due == due_spec.value_ms
    assert fields == ready_fields(
        "j1", topic=topic, due_ms=due, payload=RAW_PAYLOAD, attempt=3, max_attempts=7
    )
    assert entry_ms >= due
    assert redis_sync.exists(keys.delayed, keys.jobs, keys.inbox) == 0


@pytest.mark.parametrize(
    "size", [0, 31, 32, 300, 70_000], ids=["empty", "fixstr", "str16-min", "str16", "str32"]
)
def test_enqueue_fired_payload_bytes_are_intact_at_every_msgpack_size(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, size: int
) -> None:
    payload = bytes(i % 256 for i in range(size))  # every byte value, so not UTF-8
    assert run(enqueue.enqueue(keys, [job("j1", DueSpec("delay", 0), env(payload))])) == [
        Placed.FIRED
    ]
    [(_, fields)] = entries(redis_sync, keys)
    assert fields[Field.PAYLOAD] == payload


def test_enqueue_nothing_returns_no_codes_and_writes_nothing(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    assert run(enqueue.enqueue(keys, [])) == []
    assert redis_sync.exists(keys.delayed, keys.jobs, keys.ready, keys.inbox) == 0


@pytest.mark.parametrize("second_due", ["later", "past"])
def test_enqueue_duplicate_without_replace_is_code_2_and_changes_nothing(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, second_due: str
) -> None:
    now = server_ms(redis_sync)
    first = env(b"first")
    run(enqueue.enqueue(keys, [job("j1", at(now + MINUTE_MS), first)]))
    redis_sync.set(keys.horizon, now + HOUR_MS)  # a write would also leave an inbox note
    before = shard_state(redis_sync, keys)

    due = now + 2 * MINUTE_MS if second_due == "later" else now - 1000
    placed = run(enqueue.enqueue(keys, [job("j1", at(due), env(b"second"))]))

    assert placed == [Placed.DUPLICATE]
    assert shard_state(redis_sync, keys) == before
    assert score(redis_sync, keys, "j1") == now + MINUTE_MS
    assert redis_sync.hget(keys.jobs, "j1") == first


def test_enqueue_replace_writes_the_new_score_and_envelope(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    now = server_ms(redis_sync)
    run(enqueue.enqueue(keys, [job("j1", at(now + MINUTE_MS), env(b"first"))]))

    placed = run(
        enqueue.enqueue(keys, [job("j1", at(now + HOUR_MS), env(b"second"), replace=True)])
    )

    assert placed == [Placed.SCHEDULED]
    assert redis_sync.zrange(keys.delayed, 0, -1, withscores=True) == [(b"j1", now + HOUR_MS)]
    assert redis_sync.hgetall(keys.jobs) == {b"j1": env(b"second")}
    assert redis_sync.exists(keys.ready) == 0


def test_enqueue_replace_with_a_past_due_fires_and_removes_the_pending_copy(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, topic: str
) -> None:
    now = server_ms(redis_sync)
    run(enqueue.enqueue(keys, [job("j1", at(now + MINUTE_MS), env(b"first"))]))

    placed = run(enqueue.enqueue(keys, [job("j1", at(now - 5000), env(b"second"), replace=True)]))

    assert placed == [Placed.FIRED]
    assert [f for _, f in entries(redis_sync, keys)] == [
        ready_fields("j1", topic=topic, due_ms=now - 5000, payload=b"second")
    ]
    assert redis_sync.exists(keys.delayed, keys.jobs) == 0


def test_enqueue_replace_of_a_job_not_pending_is_a_plain_enqueue(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    due = server_ms(redis_sync) + MINUTE_MS
    assert run(enqueue.enqueue(keys, [job("j1", at(due), replace=True)])) == [Placed.SCHEDULED]
    assert score(redis_sync, keys, "j1") == due


def test_enqueue_batch_returns_each_outcome_in_order(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    now = server_ms(redis_sync)
    batch = [
        job("a", at(now + MINUTE_MS), env(b"a1")),  # scheduled
        job("b", at(now - 1000), env(b"b1")),  # fired
        job("a", at(now + HOUR_MS), env(b"a2")),  # duplicate: a is pending since this call
        job("c", at(now + MINUTE_MS), env(b"c1")),  # scheduled
        job("c", DueSpec("delay", 0), env(b"c2"), replace=True),  # fired, pending c removed
        job("b", at(now + MINUTE_MS), env(b"b2")),  # scheduled: b fired, so not pending
        job("d", at(now + 2 * MINUTE_MS), env(b"d1")),  # scheduled
        job("d", at(now + 3 * MINUTE_MS), env(b"d2"), replace=True),  # scheduled again
    ]

    placed = run(enqueue.enqueue(keys, batch))

    assert placed == [
        Placed.SCHEDULED,
        Placed.FIRED,
        Placed.DUPLICATE,
        Placed.SCHEDULED,
        Placed.FIRED,
        Placed.SCHEDULED,
        Placed.SCHEDULED,
        Placed.SCHEDULED,
    ]
    assert redis_sync.zrange(keys.delayed, 0, -1, withscores=True) == [
        (b"a", now + MINUTE_MS),
        (b"b", now + MINUTE_MS),
        (b"d", now + 3 * MINUTE_MS),
    ]
    assert redis_sync.hgetall(keys.jobs) == {b"a": env(b"a1"), b"b": env(b"b2"), b"d": env(b"d2")}
    assert [(f[Field.ID], f[Field.PAYLOAD]) for _, f in entries(redis_sync, keys)] == [
        (b"b", b"b1"),
        (b"c", b"c2"),
    ]


@pytest.mark.parametrize("repeat", [False, True], ids=["unique", "repeated"])
@pytest.mark.parametrize("replace", [False, True], ids=["keep", "replace"])
def test_enqueue_batch_of_one_mode_and_replace_places_each_job_as_if_one_by_one(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, replace: bool, repeat: bool
) -> None:
    """Such a call sends mode and replace once (store.enqueue's shared layout); when no id
    repeats it says so ('u'), and the script gathers each job's writes as it meets it."""
    now = server_ms(redis_sync)
    seed_pending(redis_sync, keys, "p", now + HOUR_MS, env(b"p0"))
    seed_pending(redis_sync, keys, "q", now + HOUR_MS + 1, env(b"q0"))
    batch = [
        job("a", at(now + MINUTE_MS), env(b"a1"), replace),
        job("b", at(now - 1000), env(b"b1"), replace),  # fired
        job("p", at(now + 2 * MINUTE_MS), env(b"p1"), replace),  # pending before the call
        job("q", at(now - 1000), env(b"q1"), replace),  # pending, due now: fired if replaced
    ]
    if repeat:
        batch.append(job("a", at(now + HOUR_MS), env(b"a2"), replace))  # pending since the call
    call = enqueue.enqueue(keys, batch)
    assert call.args[4] == ("a1" if replace else "a0") + ("" if repeat else "u")

    placed = run(call)

    again, due_now = (Placed.SCHEDULED, Placed.FIRED) if replace else (Placed.DUPLICATE,) * 2
    assert placed == [Placed.SCHEDULED, Placed.FIRED, again, due_now] + [again] * repeat
    if replace:
        a = (now + HOUR_MS, env(b"a2")) if repeat else (now + MINUTE_MS, env(b"a1"))
        left = {b"a": a, b"p": (now + 2 * MINUTE_MS, env(b"p1"))}
    else:
        a = (now + MINUTE_MS, env(b"a1"))
        left = {b"a": a, b"p": (now + HOUR_MS, env(b"p0")), b"q": (now + HOUR_MS + 1, env(b"q0"))}
    by_due = sorted(left.items(), key=lambda item: item[1][0])
    assert redis_sync.zrange(keys.delayed, 0, -1, withscores=True) == [
        (i, due) for i, (due, _) in by_due
    ]
    assert redis_sync.hgetall(keys.jobs) == {i: envelope for i, (_, envelope) in left.items()}
    assert fired_ids(redis_sync, keys) == (["b", "q"] if replace else ["b"])


# The shared layouts ('d0' ... 'a1', then '' / 'u' / 'n') against the general one: the same
# batch on fresh shards of the same pre-state gives the same codes and the same writes.
LAYOUT_IDS = "abcdef"
STEP_MS = 1_000_000
"""'d' values are multiples of it, so a written due minus the call's TIME is exact (`since`)."""
_layout_shards = itertools.count(1000)
LAYOUT_KEYS = ("delayed", "jobs", "ready", "callbacks", "inbox", "history", "history_old")
LAYOUT_KEYS += ("spooled", "dead", "lease", "horizon", "limits")  # compared by type


class LayoutCase(NamedTuple):
    mode: str  # 'a' | 'd'
    replace: bool
    pending: frozenset[str]  # ids pending before the call
    jobs: list[tuple[str, int, str]]  # id, due (offset from the case's base ms), envelope kind
    horizon: bool  # a leader preloaded up to base + 2.5 steps: jobs due by then leave notes
    ready: int | None  # the "ready" limit
    spare: int | None  # the "pending" limit, as room above the pending jobs


@st.composite
def layout_cases(draw: st.DrawFn) -> LayoutCase:
    """A batch shaped for one layout: '' may repeat ids, 'u' does not, 'n' has no pending id."""
    shape = draw(st.sampled_from(["", "u", "n"]))
    mode = draw(st.sampled_from("ad"))
    pending = draw(st.frozensets(st.sampled_from(LAYOUT_IDS), min_size=shape == "u", max_size=4))
    fresh = [i for i in LAYOUT_IDS if i not in pending]
    ids = st.sampled_from(fresh if shape == "n" else LAYOUT_IDS)
    batch = draw(st.lists(ids, min_size=1, max_size=6 if shape == "" else 4, unique=shape != ""))
    # Make the shape's case: '' a repeated id, 'u' a pending one.
    if shape == "" or (shape == "u" and not pending & set(batch)):
        extra = draw(st.sampled_from(batch if shape == "" else sorted(pending - set(batch))))
        batch.insert(draw(st.integers(0, len(batch))), extra)
    # Due now: a delay of 0, or at or before the base (read before the call); later: whole steps.
    now = st.sampled_from([-MINUTE_MS, -1, 0] if mode == "a" else [0])
    due = st.one_of(now, st.integers(1, 3).map(lambda k: k * STEP_MS))
    kind = st.sampled_from(["plain", "plain", "group", "callback"])
    return LayoutCase(
        mode,
        draw(st.booleans()),
        pending,
        [(i, draw(due), draw(kind)) for i in batch],
        draw(st.booleans()),
        draw(st.none() | st.integers(0, 3)),
        draw(st.none() | st.integers(0, 3)),
    )


def layout_envelope(n: int, kind: str) -> bytes:
    """Job n's envelope: its own payload; a group (history record) or a callback (stream)."""
    payload = str(n).encode()
    if kind == "group":
        return Envelope(payload, 2, 5, ENQUEUED_MS, group="g").pack()
    if kind == "callback":
        callback = Callback("http://callback.test/").pack()
        return Envelope(payload, 1, 5, ENQUEUED_MS, callback=callback).pack()
    return env(payload)


def layout_call(keys: ShardKeys, jobs: list[JobWrite], layout: str | None) -> Call[list[Placed]]:
    """`jobs` (one mode and replace) in the general layout (None) or the shared `layout`."""
    call = enqueue.enqueue(keys, jobs)  # the script's keys and reply parser
    args: list[str | bytes | int] = [keys.topic, keys.wake_channel, 0, ""]
    if layout is None:
        args.append("")
        for j in jobs:
            args += (j.id, *j.due.wire, "1" if j.replace else "0", j.envelope)
    else:
        args.append(layout)
        for j in jobs:
            args += (j.id, j.due.wire[1], j.envelope)
    return dataclasses.replace(call, args=args)


def since(ms: int, before: int, after: int) -> int:
    """A due a 'd' call wrote (its TIME, read between `before` and `after`, plus a whole number
    of steps) as that number of steps; a due from before the call as it is."""
    if ms < before:
        return ms
    steps, late = divmod(ms - before, STEP_MS)
    assert late <= after - before, f"{ms} is not the call's TIME plus whole steps"
    return steps * STEP_MS


def written(r: redis.Redis, keys: ShardKeys, fix: Callable[[int], int]) -> dict[str, Any]:
    """What enqueue.lua writes on the shard, with stream entry ids as (stream, position) and
    dues passed through `fix`."""
    entry_names: dict[bytes, tuple[str, int]] = {}
    streams = {}
    for lane in ("ready", "callbacks"):
        found = r.xrange(getattr(keys, lane))
        entry_names.update({entry: (lane, n) for n, (entry, _) in enumerate(found)})
        streams[lane] = [{**f, b"due": fix(int(f[Field.DUE]))} for _, f in found]
    history: dict[bytes, Any] = {}
    for field, value in r.hgetall(keys.history).items():
        if SEPARATOR.encode() in field:  # a grouped job: a record naming its entry
            record = msgpack.unpackb(value, raw=True)
            history[field] = [*record[:1], entry_names[record[1]], *record[2:]]
        else:
            history[field] = entry_names[value]
    notes = [parse_note(note) for note in r.lrange(keys.inbox, 0, -1)]
    return {
        "types": [r.type(getattr(keys, k)) for k in LAYOUT_KEYS],
        "delayed": [(m, fix(int(s))) for m, s in r.zrange(keys.delayed, 0, -1, withscores=True)],
        "jobs": r.hgetall(keys.jobs),
        **streams,
        "history": history,
        "inbox": [note and (note[0], fix(note[1])) for note in notes],
    }


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(case=layout_cases())
def test_enqueue_shared_layouts_place_and_write_as_the_general_layout(
    redis_sync: redis.Redis, topic: str, case: LayoutCase
) -> None:
    """Each shared layout the batch qualifies for ('' always; 'u' without a repeated id; 'n'
    without one pending too), each on a fresh shard of the same pre-state, returns the general
    layout's codes and leaves the same shard. Mode 'd' dues are compared as steps after the
    call's TIME (`since`); mode 'a' dues exactly."""
    note(f"{case!r}")  # Hypothesis 6.170 prints a failing example's arguments empty
    run = Runner(redis_sync)
    base = server_ms(redis_sync)
    jobs = [
        JobWrite(
            i,
            DueSpec("at", base + due) if case.mode == "a" else DueSpec("delay", due),
            case.replace,
            layout_envelope(n, kind),
        )
        for n, (i, due, kind) in enumerate(case.jobs)
    ]
    ids = [j.id for j in jobs]
    unique = len(set(ids)) == len(ids)
    fresh = unique and not case.pending & set(ids)
    if fresh:
        jobs = [j._replace(new=True) for j in jobs]
    vouched = ["", "u", "n"][: 1 + unique + fresh]
    shared = case.mode + ("1" if case.replace else "0")
    probe = enqueue.enqueue(ShardKeys(topic, 0), jobs).args[4]
    assert probe == shared + vouched[-1], "the client sends the strongest layout the batch allows"

    def outcome(layout: str | None) -> tuple[list[Placed], dict[str, Any]]:
        keys = ShardKeys(topic, next(_layout_shards))
        # The callbacks stream's ids start a year ahead (an entry added and deleted): a history
        # entry id names one stream's entry, never both.
        far = redis_sync.xadd(keys.callbacks, {"x": "x"}, id=f"{base + 365 * 86_400_000}-0")
        redis_sync.xdel(keys.callbacks, far)
        for n, i in enumerate(sorted(case.pending)):
            seed_pending(redis_sync, keys, i, ENQUEUED_MS + n, env(b"pending " + i.encode()))
        if case.horizon:
            redis_sync.set(keys.horizon, base + 5 * STEP_MS // 2)
        if case.ready is not None:
            redis_sync.hset(keys.limits, "ready", case.ready)
        if case.spare is not None:
            redis_sync.hset(keys.limits, "pending", len(case.pending) + case.spare)
        before = server_ms(redis_sync)
        placed = run(layout_call(keys, jobs, layout))
        after = server_ms(redis_sync)
        fix = (lambda ms: since(ms, before, after)) if case.mode == "d" else (lambda ms: ms)
        return placed, written(redis_sync, keys, fix)

    general = outcome(None)
    for vouch in vouched:
        layout = shared + vouch
        placed, state = outcome(layout)
        assert placed == general[0], f"layout {layout!r}: codes differ from the general layout's"
        assert state == general[1], f"layout {layout!r}: writes differ from the general layout's"


def new_job(due: DueSpec, payload: bytes) -> JobWrite:
    """A job whose id the client made (`JobWrite.new`), as `enqueue_many` makes them."""
    return JobWrite(
        make_job_id(int(time.time() * 1000), os.urandom(10)), due, False, env(payload), new=True
    )


def test_enqueue_of_new_ids_reads_none_first_and_places_them(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, wake: PubSub
) -> None:
    horizon = server_ms(redis_sync) + HOUR_MS
    redis_sync.set(keys.horizon, horizon)
    later, now = new_job(DueSpec("delay", MINUTE_MS), b"l"), new_job(DueSpec("delay", 0), b"n")
    call = enqueue.enqueue(keys, [later, now])
    assert call.args[4] == "d0n"

    assert run(call) == [Placed.SCHEDULED, Placed.FIRED]

    ((member, due),) = redis_sync.zrange(keys.delayed, 0, -1, withscores=True)
    assert member == later.id.encode() and due <= horizon
    assert redis_sync.hgetall(keys.jobs) == {later.id.encode(): env(b"l")}
    assert fired_ids(redis_sync, keys) == [now.id]
    assert next_published(wake) == f"{int(due)}:{later.id}".encode()


@pytest.mark.parametrize("offset_ms", [-30_000, 0], ids=["below", "at"])
def test_enqueue_at_or_below_the_horizon_leaves_an_inbox_note_and_publishes_it(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, wake: PubSub, offset_ms: int
) -> None:
    horizon = server_ms(redis_sync) + MINUTE_MS
    redis_sync.set(keys.horizon, horizon)
    due = horizon + offset_ms

    assert run(enqueue.enqueue(keys, [job("j1", at(due))])) == [Placed.SCHEDULED]

    note = f"{due}:j1".encode()
    assert redis_sync.lrange(keys.inbox, 0, -1) == [note]
    assert next_published(wake) == note
    assert run(fire.drain_inbox(keys, 10)) == [("j1", due)]


def test_a_batch_enqueue_below_the_horizon_publishes_its_notes_in_one_message(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, wake: PubSub
) -> None:
    # a batch written to a shard whose horizon is far ahead (one that sleeps) wakes its
    # leader with one message, not one per job; the inbox keeps a note per job
    horizon = server_ms(redis_sync) + MINUTE_MS
    redis_sync.set(keys.horizon, horizon)
    dues = {"j1": horizon - 3, "j2": horizon + 1, "j3": horizon - 1, "j4": horizon}

    placed = run(enqueue.enqueue(keys, [job(job_id, at(due)) for job_id, due in dues.items()]))

    assert placed == [Placed.SCHEDULED] * 4
    notes = [f"{dues[job_id]}:{job_id}".encode() for job_id in ("j1", "j3", "j4")]
    assert redis_sync.lrange(keys.inbox, 0, -1) == notes
    message = next_published(wake)
    assert message == b"\n".join(notes)
    assert parse_notes(message) == [(job_id, dues[job_id]) for job_id in ("j1", "j3", "j4")]
    assert_nothing_published(redis_sync, wake, keys)  # and no other message


@pytest.mark.parametrize("horizon", ["below due", "absent", "not a number"])
def test_enqueue_above_the_horizon_or_without_one_leaves_no_note(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, wake: PubSub, horizon: str
) -> None:
    due = server_ms(redis_sync) + MINUTE_MS
    if horizon == "below due":
        redis_sync.set(keys.horizon, due - 1)
    elif horizon == "not a number":
        redis_sync.set(keys.horizon, "soon")

    assert run(enqueue.enqueue(keys, [job("j1", at(due))])) == [Placed.SCHEDULED]

    assert score(redis_sync, keys, "j1") == due
    assert redis_sync.exists(keys.inbox) == 0
    assert_nothing_published(redis_sync, wake, keys)


def test_enqueue_fired_job_leaves_no_inbox_note_even_below_the_horizon(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, wake: PubSub
) -> None:
    now = server_ms(redis_sync)
    redis_sync.set(keys.horizon, now + MINUTE_MS)

    assert run(enqueue.enqueue(keys, [job("j1", at(now - 1000))])) == [Placed.FIRED]

    assert redis_sync.exists(keys.inbox) == 0
    assert_nothing_published(redis_sync, wake, keys)


SHARD_WRITE_KEYS = ["delayed", "jobs", "ready", "inbox", "horizon"]


def plant_wrong_type(r: redis.Redis, keys: ShardKeys, name: str) -> str:
    """Put a value of the wrong type at `name`; seed every other shard key with valid data."""
    now = server_ms(r)
    bad = getattr(keys, name)
    if name == "horizon":
        r.rpush(bad, "not a string")
    else:
        r.set(bad, "not a " + name)
    if name != "delayed":
        r.zadd(keys.delayed, {"old": now + MINUTE_MS})
    if name != "jobs":
        r.hset(keys.jobs, "old", env(b"old"))
    if name != "ready":
        r.xadd(keys.ready, {"id": "earlier"})
    if name != "inbox":
        r.rpush(keys.inbox, f"{now}:earlier")
    if name != "horizon":
        r.set(keys.horizon, now + HOUR_MS)
    return bad


@contextlib.contextmanager
def refused(r: redis.Redis, keys: ShardKeys, name: str, bad: str) -> Iterator[None]:
    """The block raises `name`.lua's ScriptError naming key `bad` and changes nothing."""
    before = shard_state(r, keys)
    with pytest.raises(ScriptError, match=re.escape(f"{name}.lua: key '{bad}' holds a value")):
        yield
    assert shard_state(r, keys) == before


@pytest.mark.parametrize("name", SHARD_WRITE_KEYS)
def test_enqueue_key_of_wrong_type_is_a_script_error_and_writes_nothing(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, name: str
) -> None:
    bad = plant_wrong_type(redis_sync, keys, name)
    now = server_ms(redis_sync)
    batch = [
        job("new", at(now + MINUTE_MS)),  # scheduled, below the horizon: ZSET, HASH, inbox
        job("now", DueSpec("delay", 0)),  # fired: stream
        job("old", at(now - 1000), replace=True),  # fired, pending copy removed
    ]

    with refused(redis_sync, keys, "enqueue", bad):
        run(enqueue.enqueue(keys, batch))


@pytest.mark.parametrize("call_token", ["", "c1"], ids=["plain", "spooling client's"])
@pytest.mark.parametrize("name", SHARD_WRITE_KEYS)
def test_enqueue_of_new_ids_into_a_key_of_wrong_type_writes_nothing(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, name: str, call_token: str
) -> None:
    """The hash is not read for new ids: it is checked by its type instead, in a spooling
    client's direct call (which also checks its record's) too."""
    bad = plant_wrong_type(redis_sync, keys, name)
    batch = [new_job(DueSpec("delay", 0), b"n"), new_job(DueSpec("delay", MINUTE_MS), b"l")]
    record_ms = HOUR_MS if call_token else 0

    with refused(redis_sync, keys, "enqueue", bad):
        run(enqueue.enqueue(keys, batch, record_ms, call_token))


# --- reschedule -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "state", ["never enqueued", "fired", "cancelled", "no envelope", "no score"]
)
def test_reschedule_of_a_job_not_pending_is_none_and_writes_nothing(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, state: str
) -> None:
    now = server_ms(redis_sync)
    redis_sync.set(keys.horizon, now + HOUR_MS)
    if state == "fired":
        run(enqueue.enqueue(keys, [job("j1", DueSpec("delay", 0))]))
    elif state == "cancelled":
        run(enqueue.enqueue(keys, [job("j1", at(now + MINUTE_MS))]))
        run(enqueue.cancel(keys, "j1"))
    elif state == "no envelope":
        redis_sync.zadd(keys.delayed, {"j1": now + MINUTE_MS})
    elif state == "no score":
        redis_sync.hset(keys.jobs, "j1", env())
    before = shard_state(redis_sync, keys)

    for due in (at(now + 30_000), at(now - 1000)):
        assert run(enqueue.reschedule(keys, "j1", due)) is None

    assert shard_state(redis_sync, keys) == before


@pytest.mark.parametrize("move_ms", [40 * MINUTE_MS, 30_000], ids=["later", "earlier"])
def test_reschedule_moves_a_pending_job_and_keeps_its_envelope(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, move_ms: int
) -> None:
    now = server_ms(redis_sync)
    envelope = env(RAW_PAYLOAD, 2, 3)
    run(
        enqueue.enqueue(
            keys, [job("j1", at(now + MINUTE_MS), envelope), job("other", at(now + 50 * MINUTE_MS))]
        )
    )

    assert run(enqueue.reschedule(keys, "j1", at(now + move_ms))) == Placed.SCHEDULED

    assert score(redis_sync, keys, "j1") == now + move_ms
    assert redis_sync.hget(keys.jobs, "j1") == envelope
    assert score(redis_sync, keys, "other") == now + 50 * MINUTE_MS
    assert redis_sync.exists(keys.ready) == 0


def test_reschedule_delay_is_added_to_server_time(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    seed_pending(redis_sync, keys, "j1", server_ms(redis_sync) + HOUR_MS, env())
    before = server_ms(redis_sync)
    assert run(enqueue.reschedule(keys, "j1", DueSpec("delay", MINUTE_MS))) == Placed.SCHEDULED
    after = server_ms(redis_sync)

    due = score(redis_sync, keys, "j1")
    assert due is not None and before + MINUTE_MS <= due <= after + MINUTE_MS


@pytest.mark.parametrize("when", ["delay 0", "at 5 s ago"])
def test_reschedule_to_now_or_past_fires_and_removes_the_pending_job(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, topic: str, when: str
) -> None:
    before = server_ms(redis_sync)
    seed_pending(redis_sync, keys, "j1", before + MINUTE_MS, env(RAW_PAYLOAD, 4, 6))
    redis_sync.set(keys.horizon, before + HOUR_MS)
    due_spec = DueSpec("delay", 0) if when == "delay 0" else at(before - 5000)

    assert run(enqueue.reschedule(keys, "j1", due_spec)) == Placed.FIRED
    after = server_ms(redis_sync)

    [(entry_ms, fields)] = entries(redis_sync, keys)
    due = int(fields[Field.DUE])
    assert (before <= due <= after) if when == "delay 0" else due == before - 5000
    assert fields == ready_fields(
        "j1", topic=topic, due_ms=due, payload=RAW_PAYLOAD, attempt=4, max_attempts=6
    )
    assert entry_ms >= due
    assert redis_sync.exists(keys.delayed, keys.jobs, keys.inbox) == 0


@pytest.mark.parametrize("offset_ms", [-30_000, 0], ids=["below", "at"])
def test_reschedule_at_or_below_the_horizon_leaves_an_inbox_note_and_publishes_it(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, wake: PubSub, offset_ms: int
) -> None:
    now = server_ms(redis_sync)
    horizon = now + MINUTE_MS
    seed_pending(redis_sync, keys, "j1", now + HOUR_MS, env())
    redis_sync.set(keys.horizon, horizon)

    assert run(enqueue.reschedule(keys, "j1", at(horizon + offset_ms))) == Placed.SCHEDULED

    note = f"{horizon + offset_ms}:j1".encode()
    assert redis_sync.lrange(keys.inbox, 0, -1) == [note]
    assert next_published(wake) == note


@pytest.mark.parametrize("horizon", ["below due", "absent"])
def test_reschedule_above_the_horizon_or_without_one_leaves_no_note(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, wake: PubSub, horizon: str
) -> None:
    now = seeded(redis_sync, keys, {"j1": HOUR_MS})
    if horizon == "below due":
        redis_sync.set(keys.horizon, now + MINUTE_MS - 1)

    assert run(enqueue.reschedule(keys, "j1", at(now + MINUTE_MS))) == Placed.SCHEDULED

    assert score(redis_sync, keys, "j1") == now + MINUTE_MS
    assert redis_sync.exists(keys.inbox) == 0
    assert_nothing_published(redis_sync, wake, keys)


def test_reschedule_to_now_of_a_malformed_envelope_raises_and_writes_nothing(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    now = server_ms(redis_sync)
    seed_pending(redis_sync, keys, "bad", now + MINUTE_MS, b"\xc1")
    before = shard_state(redis_sync, keys)

    with pytest.raises(MalformedJobError, match=r"job 'bad' on topic .* cannot be decoded"):
        run(enqueue.reschedule(keys, "bad", DueSpec("delay", 0)))

    assert shard_state(redis_sync, keys) == before
    assert run(enqueue.reschedule(keys, "bad", at(now + HOUR_MS))) == Placed.SCHEDULED
    assert score(redis_sync, keys, "bad") == now + HOUR_MS


def test_enqueue_of_a_malformed_envelope_due_now_raises_and_writes_nothing(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, topic: str
) -> None:
    now = server_ms(redis_sync)
    redis_sync.set(keys.horizon, now + HOUR_MS)
    before = shard_state(redis_sync, keys)
    batch = [job("later", at(now + MINUTE_MS)), job("bad", DueSpec("delay", 0), b"\xc1")]

    with pytest.raises(MalformedJobError) as caught:
        run(enqueue.enqueue(keys, batch))

    assert (caught.value.topic, caught.value.job_id) == (topic, "bad")
    assert shard_state(redis_sync, keys) == before


@pytest.mark.parametrize(
    ("name", "when"),
    # Firing does not read the horizon, so only a scheduling reschedule meets a bad one.
    [(name, when) for name in SHARD_WRITE_KEYS for when in ("later", "past")][:-1],
)
def test_reschedule_key_of_wrong_type_is_a_script_error_and_writes_nothing(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, name: str, when: str
) -> None:
    bad = plant_wrong_type(redis_sync, keys, name)
    now = server_ms(redis_sync)
    due = at(now + 30_000) if when == "later" else at(now - 1000)

    with refused(redis_sync, keys, "reschedule", bad):
        run(enqueue.reschedule(keys, "old", due))


# --- cancel ---------------------------------------------------------------------------------


def test_cancel_removes_a_pending_job_once(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    now = server_ms(redis_sync)
    run(enqueue.enqueue(keys, [job("j1", at(now + MINUTE_MS)), job("j2", at(now + MINUTE_MS))]))

    assert run(enqueue.cancel(keys, "j1")) is True
    assert score(redis_sync, keys, "j1") is None
    assert redis_sync.hexists(keys.jobs, "j1") is False
    assert score(redis_sync, keys, "j2") == now + MINUTE_MS
    assert redis_sync.hexists(keys.jobs, "j2") is True

    assert run(enqueue.cancel(keys, "j1")) is False
    assert redis_sync.zcard(keys.delayed) == 1


def test_cancel_of_an_unknown_or_fired_job_is_false_and_writes_nothing(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    run(enqueue.enqueue(keys, [job("fired", DueSpec("delay", 0))]))
    seed_pending(redis_sync, keys, "kept", server_ms(redis_sync) + MINUTE_MS, env())
    before = shard_state(redis_sync, keys)

    assert run(enqueue.cancel(keys, "unknown")) is False
    assert run(enqueue.cancel(keys, "fired")) is False

    assert shard_state(redis_sync, keys) == before


def test_cancel_of_an_envelope_without_a_score_removes_it_but_reports_false(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    redis_sync.hset(keys.jobs, "half", env())
    assert run(enqueue.cancel(keys, "half")) is False
    assert redis_sync.hexists(keys.jobs, "half") is False


@pytest.mark.parametrize("name", ["delayed", "jobs"])
def test_cancel_key_of_wrong_type_is_a_script_error_and_writes_nothing(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, name: str
) -> None:
    bad = plant_wrong_type(redis_sync, keys, name)
    with refused(redis_sync, keys, "cancel", bad):
        run(enqueue.cancel(keys, "old"))


def stamp(envelope: bytes) -> str:
    """`wq_stamp`: which write put a pending job's envelope there."""
    return hashlib.sha1(envelope).hexdigest()[:16]  # an identity, not a secret


@pytest.mark.parametrize("op", ["cancel", "reschedule"])
@pytest.mark.parametrize("differs", [None, "due", "stamp", "state"])
def test_a_guarded_cancel_or_reschedule_acts_only_on_the_job_as_selected(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, op: str, differs: str | None
) -> None:
    """A bulk action's act (issue 57 item 5): the job's state, due time and stamp must be
    those its selection recorded, else nothing is written."""
    due = server_ms(redis_sync) + 10 * MINUTE_MS  # moved a minute on: still within the horizon
    shown = env(b"shown")
    seed_pending(redis_sync, keys, "j", due, shown)
    selected = Selected(
        differs == "state",
        due + 1 if differs == "due" else due,
        stamp(env(b"written again") if differs == "stamp" else shown),
    )
    before = shard_state(redis_sync, keys)
    if op == "cancel":
        acted = run(enqueue.cancel(keys, "j", selected)) is True
    else:
        placed = run(enqueue.reschedule(keys, "j", at(due + MINUTE_MS), selected))
        acted = placed is Placed.SCHEDULED
    if differs is not None:
        assert not acted
        assert shard_state(redis_sync, keys) == before
    else:
        assert acted
        assert score(redis_sync, keys, "j") == (None if op == "cancel" else due + MINUTE_MS)


def test_a_guarded_cancel_of_a_retry_matches_it_under_an_alias_member(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    due = server_ms(redis_sync) + HOUR_MS
    alias = f"j{SEPARATOR}g{SEPARATOR}1-0"
    retry = Envelope(b"p", 2, 5, ENQUEUED_MS, group="g", job_id="j").pack()
    seed_pending(redis_sync, keys, alias, due, retry)
    redis_sync.zadd(keys.retries, {alias: 0})
    assert run(enqueue.cancel(keys, "j", Selected(False, due, stamp(retry)))) is False
    assert run(enqueue.cancel(keys, "j", Selected(True, due, stamp(retry)))) is True
    assert score(redis_sync, keys, alias) is None
    assert redis_sync.zcard(keys.retries) == 0


# --- emit_due -------------------------------------------------------------------------------


@pytest.mark.parametrize("lease", ["absent", "held by another", "empty token"])
def test_emit_due_without_the_lease_raises_and_changes_nothing(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, lease: str
) -> None:
    now = seeded(redis_sync, keys, {"due": -1000})
    token = TOKEN
    if lease == "held by another":
        redis_sync.set(keys.lease, OTHER, px=TTL_MS)
    elif lease == "empty token":
        token = ""  # GET of an absent lease must not equal an empty token
    before = shard_state(redis_sync, keys)

    with pytest.raises(LeaseLostError, match=r"emit_due\.lua"):
        run(fire.emit_due(keys, token, now, ["due"]))
    with pytest.raises(LeaseLostError, match=r"emit_due\.lua"):
        run(fire.emit_due(keys, token, now, limit=10))

    assert shard_state(redis_sync, keys) == before


@pytest.mark.usefixtures("leader")
def test_emit_due_moves_due_ids_to_the_stream_exactly_once(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, topic: str
) -> None:
    now = server_ms(redis_sync)
    seed_pending(redis_sync, keys, "a", now - 5000, env(b"pa", 1, 3))
    seed_pending(redis_sync, keys, "b", now - 4000, env(RAW_PAYLOAD, 2, 9))
    seed_pending(redis_sync, keys, "later", now + MINUTE_MS, env())

    first = run(fire.emit_due(keys, TOKEN, now, ["b", "a"]))
    second = run(fire.emit_due(keys, TOKEN, now, ["b", "a"]))

    assert first == EmitResult(2, False, 0, [])
    assert second == EmitResult(0, False, 0, [])
    stream = entries(redis_sync, keys)
    assert [fields for _, fields in stream] == [
        ready_fields(
            "b", topic=topic, due_ms=now - 4000, payload=RAW_PAYLOAD, attempt=2, max_attempts=9
        ),
        ready_fields("a", topic=topic, due_ms=now - 5000, payload=b"pa", attempt=1, max_attempts=3),
    ]
    assert all(entry_ms >= int(fields[Field.DUE]) for entry_ms, fields in stream)
    assert redis_sync.zrange(keys.delayed, 0, -1) == [b"later"]
    assert list(redis_sync.hgetall(keys.jobs)) == [b"later"]


@pytest.mark.usefixtures("leader")
def test_emit_due_same_id_twice_in_one_call_emits_it_once(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    now = seeded(redis_sync, keys, {"a": -1000})

    assert run(fire.emit_due(keys, TOKEN, now, ["a", "a"])) == EmitResult(1, False, 0, [])
    assert fired_ids(redis_sync, keys) == ["a"]


@pytest.mark.usefixtures("leader")
def test_emit_due_skips_cancelled_and_unknown_ids(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    now = seeded(redis_sync, keys, {"a": -2000, "b": -1000})
    assert run(enqueue.cancel(keys, "a")) is True

    result = run(fire.emit_due(keys, TOKEN, now, ["a", "b", "never"]))

    assert result == EmitResult(1, False, 0, [])
    assert fired_ids(redis_sync, keys) == ["b"]


@pytest.mark.usefixtures("leader")
def test_emit_due_returns_ids_not_yet_due_with_their_score(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    now = seeded(redis_sync, keys, {"due": -1000})
    seed_pending(redis_sync, keys, "moved", now + MINUTE_MS, env(b"moved"))
    seed_pending(redis_sync, keys, "just-after", now + 1, env())

    result = run(fire.emit_due(keys, TOKEN, now, ["moved", "due", "just-after"]))

    assert result == EmitResult(1, False, 0, [("moved", now + MINUTE_MS), ("just-after", now + 1)])
    assert fired_ids(redis_sync, keys) == ["due"]
    assert score(redis_sync, keys, "moved") == now + MINUTE_MS
    assert redis_sync.hget(keys.jobs, "moved") == env(b"moved")


@pytest.mark.usefixtures("leader")
def test_emit_due_never_fires_after_server_time_whatever_argv_now_says(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    now = seeded(redis_sync, keys, {"j1": MINUTE_MS})
    caller_now = now + 2 * MINUTE_MS  # a caller clock two minutes ahead of the server

    wheel = run(fire.emit_due(keys, TOKEN, caller_now, ["j1"]))
    sweep = run(fire.emit_due(keys, TOKEN, caller_now, limit=10))

    assert wheel == EmitResult(0, False, 0, [("j1", now + MINUTE_MS)])
    assert sweep == EmitResult(0, False, 0, [])
    assert redis_sync.exists(keys.ready) == 0
    assert score(redis_sync, keys, "j1") == now + MINUTE_MS


@pytest.mark.usefixtures("leader")
def test_emit_due_uses_argv_now_when_it_is_earlier_than_server_time(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    now = seeded(redis_sync, keys, {"j1": -1000})
    caller_now = now - 2000  # the sweep's bound (now - grace) is behind TIME on purpose

    wheel = run(fire.emit_due(keys, TOKEN, caller_now, ["j1"]))
    sweep = run(fire.emit_due(keys, TOKEN, caller_now, limit=10))

    assert wheel == EmitResult(0, False, 0, [("j1", now - 1000)])
    assert sweep == EmitResult(0, False, 0, [])
    assert redis_sync.exists(keys.ready) == 0
    assert run(fire.emit_due(keys, TOKEN, now - 1000, limit=10)) == EmitResult(1, False, 0, [])


@pytest.mark.usefixtures("leader")
def test_emit_due_sweep_emits_oldest_first_at_most_limit_and_flags_more(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    now = server_ms(redis_sync)
    for i in (3, 1, 5, 2, 4):  # inserted out of order
        seed_pending(redis_sync, keys, f"d{i}", now - 1000 * (6 - i), env())
    seed_pending(redis_sync, keys, "future", now + MINUTE_MS, env())

    first = run(fire.emit_due(keys, TOKEN, now, limit=3))
    assert first == EmitResult(3, True, 0, [])
    assert fired_ids(redis_sync, keys) == ["d1", "d2", "d3"]

    second = run(fire.emit_due(keys, TOKEN, now, limit=3))
    assert second == EmitResult(2, False, 0, [])
    assert fired_ids(redis_sync, keys) == ["d1", "d2", "d3", "d4", "d5"]

    assert run(fire.emit_due(keys, TOKEN, now, limit=3)) == EmitResult(0, False, 0, [])
    assert redis_sync.zrange(keys.delayed, 0, -1) == [b"future"]
    assert [int(f[Field.DUE]) for _, f in entries(redis_sync, keys)] == [
        now - 5000,
        now - 4000,
        now - 3000,
        now - 2000,
        now - 1000,
    ]


@pytest.mark.usefixtures("leader")
def test_emit_due_sweep_of_exactly_limit_jobs_has_no_more(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    now = server_ms(redis_sync)
    for i in range(3):
        seed_pending(redis_sync, keys, f"d{i}", now - 1000 - i, env())

    assert run(fire.emit_due(keys, TOKEN, now, limit=3)) == EmitResult(3, False, 0, [])
    assert redis_sync.exists(keys.delayed, keys.jobs) == 0


@pytest.mark.usefixtures("leader")
@pytest.mark.parametrize("mode", ["wheel", "sweep"])
def test_emit_due_counts_and_removes_orphans(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, mode: str
) -> None:
    now = server_ms(redis_sync)
    redis_sync.zadd(keys.delayed, {"orphan": now - 2000})  # a score without an envelope
    seed_pending(redis_sync, keys, "good", now - 1000, env())

    ids = ["orphan", "good"] if mode == "wheel" else []
    result = run(fire.emit_due(keys, TOKEN, now, ids, limit=10))

    assert result == EmitResult(1, False, 1, [])
    assert fired_ids(redis_sync, keys) == ["good"]
    assert redis_sync.exists(keys.delayed, keys.jobs) == 0


@pytest.mark.usefixtures("leader")
@pytest.mark.parametrize("name", ["delayed", "jobs", "ready"])
def test_emit_due_key_of_wrong_type_is_a_script_error_and_writes_nothing(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, name: str
) -> None:
    bad = plant_wrong_type(redis_sync, keys, name)
    now = server_ms(redis_sync)
    if name != "delayed":
        redis_sync.zadd(keys.delayed, {"old": now - 1000})  # due, so a write would show
    with refused(redis_sync, keys, "emit_due", bad):
        run(fire.emit_due(keys, TOKEN, now, ["old"]))
    with refused(redis_sync, keys, "emit_due", bad):
        run(fire.emit_due(keys, TOKEN, now, limit=10))


@pytest.mark.usefixtures("leader")
def test_emit_due_with_a_non_numeric_now_errors_before_writing(
    redis_sync: redis.Redis, keys: ShardKeys, topic: str
) -> None:
    seed_pending(redis_sync, keys, "due", server_ms(redis_sync) - 1000, env())
    redis_sync.script_load(script("emit_due").source)
    before = shard_state(redis_sync, keys)

    with pytest.raises(redis.ResponseError):
        redis_sync.evalsha(
            script("emit_due").sha,
            5,
            keys.delayed,
            keys.jobs,
            keys.ready,
            keys.lease,
            keys.dead,
            TOKEN,
            topic,
            "soon",
            10,
            1_000_000,
            "due",
        )

    assert shard_state(redis_sync, keys) == before


@pytest.mark.usefixtures("leader")
@pytest.mark.parametrize("mode", ["wheel", "sweep"])
def test_emitted_entries_never_precede_their_due_on_the_server_clock(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, mode: str
) -> None:
    """Jobs due a few ms from now, emitted as soon as the script lets them go."""
    ids = [f"j{i}" for i in range(20)]
    run(enqueue.enqueue(keys, [job(j, DueSpec("delay", 20 + 10 * i)) for i, j in enumerate(ids)]))
    dues = {j: score(redis_sync, keys, j) for j in ids}
    far_future = server_ms(redis_sync) + HOUR_MS  # the caller's now: only TIME holds jobs back

    def all_emitted() -> bool:
        run(fire.emit_due(keys, TOKEN, far_future, ids if mode == "wheel" else (), limit=100))
        return redis_sync.zcard(keys.delayed) == 0

    eventually_sync(all_emitted, timeout_s=10, what="every job to be emitted")

    stream = entries(redis_sync, keys)
    assert sorted(f[Field.ID].decode() for _, f in stream) == sorted(ids)
    for entry_ms, fields in stream:
        assert int(fields[Field.DUE]) == dues[fields[Field.ID].decode()]
        assert entry_ms >= int(fields[Field.DUE]), f"{fields[Field.ID]!r} entered the stream early"


MALFORMED_ENVELOPES = [
    pytest.param(b"\xc1 never a msgpack byte", id="not-msgpack"),
    pytest.param(b"\x95\x01", id="truncated"),
    pytest.param(b"", id="empty"),
    pytest.param(msgpack.packb("just a string"), id="a-string"),
    pytest.param(msgpack.packb({"a": 1}), id="a-map"),
    pytest.param(msgpack.packb([2, "p", 1, 5, 0]), id="unknown-version"),
    pytest.param(msgpack.packb([1, 5, 1, 5, 0]), id="payload-not-a-string"),
    pytest.param(msgpack.packb([1, "p", 1.5, 5, 0]), id="attempt-not-an-int"),
    pytest.param(msgpack.packb([1, "p", 1, -5, 0]), id="negative-max-attempts"),
    pytest.param(msgpack.packb([1, "p", 1, 5, 0, 7, ""]), id="group-not-a-string"),
    pytest.param(msgpack.packb([1, "p"]), id="too-short"),
]


@pytest.mark.usefixtures("leader")
@pytest.mark.parametrize("mode", ["wheel", "sweep"])
@pytest.mark.parametrize("garbage", MALFORMED_ENVELOPES)
def test_emit_due_dead_letters_a_malformed_envelope_once_and_fires_the_others(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, topic: str, mode: str, garbage: bytes
) -> None:
    now = server_ms(redis_sync)
    seed_pending(redis_sync, keys, "a", now - 3000, env(b"pa"))
    seed_pending(redis_sync, keys, "bad", now - 2000, garbage)
    seed_pending(redis_sync, keys, "c", now - 1000, env(b"pc"))
    ids = ["a", "bad", "c"] if mode == "wheel" else []

    first = run(fire.emit_due(keys, TOKEN, now, ids, limit=10))
    second = run(fire.emit_due(keys, TOKEN, now, ids, limit=10))

    assert first == EmitResult(2, False, 0, [], malformed=["bad"])
    assert second == EmitResult(0, False, 0, [])
    assert fired_ids(redis_sync, keys) == ["a", "c"]
    assert redis_sync.exists(keys.delayed, keys.jobs) == 0
    ((_, dead),) = redis_sync.xrange(keys.dead)
    assert dead[Field.ID] == b"bad"
    assert dead[Field.TOPIC] == topic.encode()
    assert dead[Field.DUE] == str(now - 2000).encode()
    assert dead[Field.REASON] == b"malformed"
    assert dead[Field.ERROR].startswith(b"malformed envelope: ")
    assert dead[Field.ENVELOPE] == garbage
    assert b"payload" not in dead, "a payload field would make the entry replayable"


@pytest.mark.usefixtures("leader")
def test_emit_due_malformed_envelope_into_a_dead_stream_of_wrong_type_writes_nothing(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    now = server_ms(redis_sync)
    seed_pending(redis_sync, keys, "bad", now - 2000, b"\xc1")
    redis_sync.set(keys.dead, "not a stream")
    before = shard_state(redis_sync, keys)

    with pytest.raises(ScriptError, match=re.escape(f"key '{keys.dead}' holds a value")):
        run(fire.emit_due(keys, TOKEN, now, ["bad"]))

    assert shard_state(redis_sync, keys) == before


def sized(n: int) -> bytes:
    """An envelope of about `n` bytes (within a few)."""
    return env(b"x" * (n - len(env(b""))))


@pytest.mark.usefixtures("leader")
def test_emit_due_byte_budget_moves_what_fits_plus_one_and_holds_the_rest(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    now = server_ms(redis_sync)
    for name in ("b1", "b2", "b3"):
        seed_pending(redis_sync, keys, name, now - 1000, sized(300))
    for name in ("s1", "s2", "s3"):
        seed_pending(redis_sync, keys, name, now - 1000, sized(50))
    ids = ["b1", "b2", "b3", "s1", "s2", "s3"]

    first = run(fire.emit_due(keys, TOKEN, now, ids, max_bytes=256))

    # b1 alone is over the budget and goes as the one extra; the small ones fit after it
    assert first == EmitResult(4, False, 0, [], held=["b2", "b3"])
    assert fired_ids(redis_sync, keys) == ["b1", "s1", "s2", "s3"]
    assert redis_sync.zrange(keys.delayed, 0, -1) == [b"b2", b"b3"]
    assert run(fire.emit_due(keys, TOKEN, now, ["b2", "b3"], max_bytes=256)) == EmitResult(
        1, False, 0, [], held=["b3"]
    )
    assert run(fire.emit_due(keys, TOKEN, now, ["b3"], max_bytes=256)) == EmitResult(
        1, False, 0, []
    )
    assert redis_sync.exists(keys.delayed, keys.jobs) == 0


@pytest.mark.usefixtures("leader")
def test_emit_due_byte_budget_stops_once_reached(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    now = server_ms(redis_sync)
    ids = [f"s{i}" for i in range(6)]
    for name in ids:
        seed_pending(redis_sync, keys, name, now - 1000, sized(50))

    result = run(fire.emit_due(keys, TOKEN, now, ids, max_bytes=110))

    assert result == EmitResult(3, False, 0, [], held=["s3", "s4", "s5"])  # 2 fit, 1 extra
    assert run(fire.emit_due(keys, TOKEN, now, ids)) == EmitResult(3, False, 0, [])  # no bound


@pytest.mark.usefixtures("leader")
def test_emit_due_sweep_byte_budget_flags_more_and_goes_on_next_call(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    now = server_ms(redis_sync)
    seed_pending(redis_sync, keys, "b1", now - 3000, sized(300))
    seed_pending(redis_sync, keys, "b2", now - 2000, sized(300))
    seed_pending(redis_sync, keys, "s1", now - 1000, sized(50))

    first = run(fire.emit_due(keys, TOKEN, now, limit=10, max_bytes=256))
    second = run(fire.emit_due(keys, TOKEN, now, limit=10, max_bytes=256))

    assert first == EmitResult(2, True, 0, [], held=["b2"])
    assert second == EmitResult(1, False, 0, [])
    assert fired_ids(redis_sync, keys) == ["b1", "s1", "b2"]


@pytest.mark.usefixtures("leader")
def test_emit_due_on_a_line_fires_nothing_until_a_sweep_has_held_every_due_job(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    """Bug: a new leader's catch-up sweep lined one page of the oldest due jobs and fired the
    best of that page, while better-ranked jobs due a little later still sat in the sorted
    set: priority-0 jobs fired ahead of priority-9 ones due when they fired."""
    now = server_ms(redis_sync)
    redis_sync.hset(keys.limits, "ordered", "1")
    for i in range(4):
        seed_pending(redis_sync, keys, f"low{i}", now - 3000 + i, env())
    urgent = dataclasses.replace(Envelope.unpack(env()), priority=9).pack()
    seed_pending(redis_sync, keys, "urgent", now - 2000, urgent)

    pages = [run(fire.emit_due(keys, TOKEN, now, limit=2)) for _ in range(3)]

    assert [(p.emitted, p.more) for p in pages] == [(0, True), (0, True), (5, False)]
    assert fired_ids(redis_sync, keys) == ["urgent", "low0", "low1", "low2", "low3"]
    assert redis_sync.hlen(keys.held) == 0


# --- drop_shard -----------------------------------------------------------------------------


def fill_shard(r: redis.Redis, keys: ShardKeys) -> None:
    """Something in every key of the shard but the sorted set: no job to run."""
    now = server_ms(r)
    r.hset(keys.jobs, "orphan", env())
    r.xadd(keys.dead, {"id": "dead"})
    r.set(keys.lease, OTHER, px=TTL_MS)
    r.set(keys.followed, OTHER)
    r.set(keys.horizon, now, px=TTL_MS)
    r.rpush(keys.inbox, f"{now}:x")
    r.zadd(keys.spooled, {"spool:1": now})
    r.hset(keys.history, "acked", "1-0")
    r.hset(keys.history_old, "older", "0-1")
    r.zadd(keys.cancelled, {"gone": now})
    r.hset(keys.debounce, "k", now)
    r.hset(keys.limits, "pending", 10)
    r.hset(keys.schedules, "nightly", b"definition")
    r.hset(keys.sched_state, "nightly", now)
    r.set(keys.sched_epoch, 3)
    r.hset(keys.sched_marks, "nightly", f"3:{now}")
    r.zadd(keys.retries, {"stale\x1fg1\x1f1-0": 0})
    r.zadd(keys.waiters, {"acked\x1fg1": now + TTL_MS})
    r.xadd(keys.done, {"acked\x1fg1": "1"})
    r.xadd(keys.events, {"k": "fired", "id": "acked"})
    r.hset(keys.far, "width", 60_000)  # a far tier's meta with no far job in it
    r.hset(keys.weights, "tenant-a", 3)
    # the key index of a key none of whose jobs is pending (a count only a job written
    # before the index could leave): its list goes with the shard
    r.hset(keys.keyed, "tenant-a", 1)
    r.rpush(key_list_key(keys, "tenant-a"), b"\x01gone")
    # an edge left of a job that ended (its followers told) and a waiting job's record
    r.hset(keys.followers, "acked", b"\x90")
    r.hset(keys.waiting, "w", b"\x94")
    r.xadd(keys.ready, {"id": "acked"})
    r.xgroup_create(keys.ready, "g1", id="0")
    r.xgroup_create(keys.ready, "g2", id="0")
    for group in ("g1", "g2"):
        for entry_id, _ in r.xreadgroup(group, "c", {keys.ready: ">"})[0][1]:
            r.xack(keys.ready, group, entry_id)
    r.xadd(keys.callbacks, {"id": "delivered"})
    r.xgroup_create(keys.callbacks, "callbacks", id="0")
    for entry_id, _ in r.xreadgroup("callbacks", "c", {keys.callbacks: ">"})[0][1]:
        r.xack(keys.callbacks, "callbacks", entry_id)


def test_drop_shard_deletes_every_key_of_a_shard_with_nothing_to_run(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    fill_shard(redis_sync, keys)
    before = shard_state(redis_sync, keys)
    # All but :delayed, :held and :turns: the due line's keys exist only while jobs wait on it,
    # and then the shard has jobs to run (test_due_line_views.py drops one by force); nor
    # :notices, outcomes not yet heard: the shard has them to pass on.
    assert redis_sync.exists(*keys.data_keys) == len(keys.data_keys) - 4

    assert run(topics.drop_shard(keys, "check")) == topics.ShardDrop(False, 0, 0)
    assert shard_state(redis_sync, keys) == before, "check changed something"
    assert run(topics.drop_shard(keys, "drop")) == topics.ShardDrop(True, 0, 0)

    assert redis_sync.exists(*keys.data_keys) == 0
    assert redis_sync.exists(key_list_key(keys, "tenant-a")) == 0


@pytest.mark.parametrize(
    ("kind", "pending", "unacked"),
    [
        ("pending job", 1, 0),
        ("entry pending in a group", 0, 1),
        ("entry not yet delivered to a group", 0, 1),
        ("entry in a stream no group reads", 0, 2),
        ("entry deleted after delivery (lag unknown)", 0, 1),
        ("callback not yet delivered", 0, 1),
    ],
)
def test_drop_shard_refuses_while_a_job_is_left_to_run_and_force_drops_it(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, kind: str, pending: int, unacked: int
) -> None:
    fill_shard(redis_sync, keys)
    if kind == "pending job":
        seed_pending(redis_sync, keys, "p", server_ms(redis_sync) + MINUTE_MS, env())
    elif kind == "entry pending in a group":
        redis_sync.xadd(keys.ready, {"id": "read-not-acked"})
        redis_sync.xreadgroup("g1", "c", {keys.ready: ">"})
        redis_sync.xreadgroup("g2", "c", {keys.ready: ">"})
        redis_sync.xack(keys.ready, "g2", redis_sync.xrange(keys.ready)[-1][0])
    elif kind == "entry not yet delivered to a group":
        redis_sync.xadd(keys.ready, {"id": "new"})
        for entry_id, _ in redis_sync.xreadgroup("g1", "c", {keys.ready: ">"})[0][1]:
            redis_sync.xack(keys.ready, "g1", entry_id)
    elif kind == "callback not yet delivered":
        redis_sync.xadd(keys.callbacks, {"id": "hooked"})
    elif kind == "entry in a stream no group reads":
        redis_sync.xgroup_destroy(keys.ready, "g1")
        redis_sync.xgroup_destroy(keys.ready, "g2")
        redis_sync.xadd(keys.ready, {"id": "second"})
    else:
        gone = redis_sync.xadd(keys.ready, {"id": "deleted"})
        redis_sync.xadd(keys.ready, {"id": "undelivered"})
        redis_sync.xreadgroup("g1", "c", {keys.ready: ">"}, count=1)
        redis_sync.xack(keys.ready, "g1", gone)
        redis_sync.xdel(keys.ready, gone)
        for entry_id, _ in redis_sync.xreadgroup("g2", "c", {keys.ready: ">"})[0][1]:
            redis_sync.xack(keys.ready, "g2", entry_id)
    before = shard_state(redis_sync, keys)

    assert run(topics.drop_shard(keys, "check")) == topics.ShardDrop(False, pending, unacked)
    assert run(topics.drop_shard(keys, "drop")) == topics.ShardDrop(False, pending, unacked)
    assert shard_state(redis_sync, keys) == before
    assert redis_sync.exists(keys.dead) == 1
    assert run(topics.drop_shard(keys, "force")) == topics.ShardDrop(True, 0, 0)
    assert redis_sync.exists(*keys.data_keys) == 0


@pytest.mark.parametrize("name", ["delayed", "ready", "callbacks"])
def test_drop_shard_with_a_key_of_wrong_type_refuses_unless_forced(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, name: str
) -> None:
    bad = plant_wrong_type(redis_sync, keys, name)
    with refused(redis_sync, keys, "drop_shard", bad):
        run(topics.drop_shard(keys, "drop"))
    assert run(topics.drop_shard(keys, "force")).dropped
    assert redis_sync.exists(*keys.data_keys) == 0


# --- preload --------------------------------------------------------------------------------


@pytest.mark.parametrize("lease", ["absent", "held by another"])
def test_preload_without_the_lease_raises_and_leaves_the_horizon(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, lease: str
) -> None:
    if lease == "held by another":
        redis_sync.set(keys.lease, OTHER, px=TTL_MS)
    redis_sync.set(keys.horizon, "123")
    seed_pending(redis_sync, keys, "j1", server_ms(redis_sync) + 1000, env())
    before = shard_state(redis_sync, keys)

    with pytest.raises(LeaseLostError, match=r"preload\.lua"):
        run(fire.preload(keys, TOKEN, 0, MINUTE_MS, 100, TTL_MS))

    assert shard_state(redis_sync, keys) == before
    assert redis_sync.pttl(keys.horizon) == -1


@pytest.mark.usefixtures("leader")
def test_preload_returns_the_jobs_after_the_cursor_up_to_time_plus_window(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    t0 = server_ms(redis_sync)
    cursor = t0 - 10_000
    window = MINUTE_MS
    for job_id, due in {
        "before-cursor": cursor - 5,
        "at-cursor": cursor,
        "after-cursor": cursor + 1,
        "soon": t0 + 30_000,
        "at-window-edge": t0 + window,
        "beyond-window": t0 + window + HOUR_MS,
    }.items():
        seed_pending(redis_sync, keys, job_id, due, env())

    page = run(fire.preload(keys, TOKEN, cursor, window, 100, TTL_MS))
    t1 = server_ms(redis_sync)

    assert t0 <= page.server_now_ms <= t1
    assert page.full is False
    assert page.cursor_ms == page.server_now_ms + window
    assert page.jobs == [
        ("after-cursor", cursor + 1),
        ("soon", t0 + 30_000),
        ("at-window-edge", t0 + window),
    ]
    assert int(redis_sync.get(keys.horizon)) == page.cursor_ms
    # It expires a lease ttl after the time it names (server time moved on since).
    assert window < redis_sync.pttl(keys.horizon) <= window + TTL_MS
    assert redis_sync.zcard(keys.delayed) == 6  # preload only reads


@pytest.mark.usefixtures("leader")
def test_preload_of_an_empty_shard_moves_the_cursor_to_the_window_end(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    page = run(fire.preload(keys, TOKEN, 0, MINUTE_MS, 10, TTL_MS))

    assert page.jobs == []
    assert page.full is False
    assert page.cursor_ms == page.server_now_ms + MINUTE_MS
    assert int(redis_sync.get(keys.horizon)) == page.cursor_ms


@pytest.mark.usefixtures("leader")
def test_preload_full_page_ends_at_its_last_score(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    t0 = server_ms(redis_sync)
    dues = [t0 + 1000 * i for i in range(1, 6)]
    for i, due in enumerate(dues):
        seed_pending(redis_sync, keys, f"j{i}", due, env())

    page = run(fire.preload(keys, TOKEN, t0, MINUTE_MS, 3, TTL_MS))

    assert page.full is True
    assert page.cursor_ms == dues[2]
    assert page.jobs == [("j0", dues[0]), ("j1", dues[1]), ("j2", dues[2])]
    assert int(redis_sync.get(keys.horizon)) == dues[2]

    rest = run(fire.preload(keys, TOKEN, page.cursor_ms, MINUTE_MS, 3, TTL_MS))
    assert rest.full is False
    assert rest.jobs == [("j3", dues[3]), ("j4", dues[4])]


@pytest.mark.usefixtures("leader")
def test_preload_full_page_keeps_every_job_of_its_last_millisecond(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    t0 = server_ms(redis_sync)
    crowded = t0 + 20_000
    expected_first: dict[str, int] = {}
    for i in range(1, 6):
        seed_pending(redis_sync, keys, f"early{i}", crowded - i, env())
        expected_first[f"early{i}"] = crowded - i
    for i in range(50):
        seed_pending(redis_sync, keys, f"same{i:02}", crowded, env())
        expected_first[f"same{i:02}"] = crowded
    for i in range(3):
        seed_pending(redis_sync, keys, f"next{i}", crowded + 1, env())

    page = run(fire.preload(keys, TOKEN, t0, MINUTE_MS, 10, TTL_MS))

    assert page.full is True
    assert page.cursor_ms == crowded
    assert len(page.jobs) == 55
    assert dict(page.jobs) == expected_first
    assert [due for _, due in page.jobs] == sorted(due for _, due in page.jobs)
    assert int(redis_sync.get(keys.horizon)) == crowded

    rest = run(fire.preload(keys, TOKEN, page.cursor_ms, MINUTE_MS, 10, TTL_MS))
    assert rest.full is False
    assert rest.jobs == [("next0", crowded + 1), ("next1", crowded + 1), ("next2", crowded + 1)]


@pytest.mark.usefixtures("leader")
def test_preload_page_of_one_crowded_millisecond_only(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    crowded = server_ms(redis_sync) + 20_000
    for i in range(25):
        seed_pending(redis_sync, keys, f"same{i:02}", crowded, env())

    page = run(fire.preload(keys, TOKEN, 0, MINUTE_MS, 10, TTL_MS))
    assert page.full is True
    assert page.cursor_ms == crowded
    assert sorted(page.jobs) == [(f"same{i:02}", crowded) for i in range(25)]

    rest = run(fire.preload(keys, TOKEN, page.cursor_ms, MINUTE_MS, 10, TTL_MS))
    assert (rest.full, rest.jobs) == (False, [])


@pytest.mark.usefixtures("leader")
def test_preload_sets_the_horizon_to_its_own_reach_below_an_earlier_plan(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    # An earlier read planned a long sleep and reached far; now that jobs are near, the
    # new plan reads again soon, so jobs beyond the window need no note (and get none).
    t0 = server_ms(redis_sync)
    redis_sync.set(keys.horizon, t0 + HOUR_MS)  # no TTL: the preload must give it one
    for i in range(3):
        seed_pending(redis_sync, keys, f"j{i}", t0 + 1000 + i, env())

    page = run(fire.preload(keys, TOKEN, t0, MINUTE_MS, 100, TTL_MS, least_ms=500, most_ms=9000))
    assert page.next_read_ms == page.server_now_ms + 500
    assert int(redis_sync.get(keys.horizon)) == page.cursor_ms == page.server_now_ms + MINUTE_MS
    assert MINUTE_MS - 1000 < redis_sync.pttl(keys.horizon) <= MINUTE_MS + TTL_MS

    full = run(fire.preload(keys, TOKEN, t0, MINUTE_MS, 2, TTL_MS))  # a page ending at t0 + 1001
    assert full.full is True and full.cursor_ms == t0 + 1001
    assert full.next_read_ms == full.server_now_ms, "the rest of the page: read again now"
    assert int(redis_sync.get(keys.horizon)) == t0 + 1001


@pytest.mark.usefixtures("leader")
def test_preload_plans_an_empty_shard_to_sleep_the_longest_and_covers_it_with_the_horizon(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    page = run(fire.preload(keys, TOKEN, 0, 1000, 10, TTL_MS, least_ms=500, most_ms=60_000))

    assert page.next_read_ms == page.server_now_ms + 60_000
    assert int(redis_sync.get(keys.horizon)) == page.next_read_ms + 500, "half a window past"
    assert page.overdue is False


@pytest.mark.usefixtures("leader")
def test_preload_plans_the_next_read_when_the_earliest_job_comes_within_the_window(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    t0 = server_ms(redis_sync)
    seed_pending(redis_sync, keys, "later", t0 + 20_000, env())

    page = run(fire.preload(keys, TOKEN, 0, 1000, 10, TTL_MS, least_ms=500, most_ms=60_000))

    assert page.jobs == []
    assert page.next_read_ms == t0 + 19_000, "when it comes within the window"
    horizon = int(redis_sync.get(keys.horizon))
    assert horizon == page.next_read_ms + 500
    assert horizon < t0 + 20_000, "the job already written is read, not noted"


@pytest.mark.usefixtures("leader")
def test_preload_of_a_shard_with_jobs_in_the_window_plans_the_least_sleep(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    t0 = server_ms(redis_sync)
    seed_pending(redis_sync, keys, "overdue", t0 - 5000, env())
    seed_pending(redis_sync, keys, "soon", t0 + 300, env())

    page = run(
        fire.preload(
            keys, TOKEN, t0, 1000, 10, TTL_MS, least_ms=500, most_ms=60_000, overdue_ms=t0 - 1000
        )
    )

    assert page.jobs == [("soon", t0 + 300)]
    assert page.next_read_ms == page.server_now_ms + 500
    assert int(redis_sync.get(keys.horizon)) == page.cursor_ms, "no reach past the window"
    assert page.overdue is True
    quiet = run(fire.preload(keys, TOKEN, t0, 1000, 10, TTL_MS, overdue_ms=t0 - 6000))
    assert quiet.overdue is False
    assert quiet.next_read_ms == quiet.server_now_ms, "no plan asked: read again now"


# --- leases ---------------------------------------------------------------------------------


def test_lease_acquire_of_a_free_lease_takes_it_sets_the_horizon_and_clears_the_inbox(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    redis_sync.rpush(keys.inbox, "1:stale", "2:stale")
    redis_sync.set(keys.horizon, "1")  # left by an earlier leader; replaced by TIME
    t0 = server_ms(redis_sync)

    attempt = run(leases.lease_acquire(keys, TOKEN, TTL_MS))
    t1 = server_ms(redis_sync)

    assert attempt.held is True and attempt.new is True and attempt.holder == TOKEN
    assert t0 <= attempt.server_now_ms <= t1
    assert redis_sync.get(keys.lease) == TOKEN.encode()
    assert 0 < redis_sync.pttl(keys.lease) <= TTL_MS
    assert int(redis_sync.get(keys.horizon)) == attempt.server_now_ms
    assert 0 < redis_sync.pttl(keys.horizon) <= TTL_MS
    assert redis_sync.exists(keys.inbox) == 0


def test_lease_acquire_of_our_own_lease_renews_it_and_keeps_horizon_and_inbox(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    run(leases.lease_acquire(keys, TOKEN, TTL_MS))
    redis_sync.set(keys.horizon, "12345", px=TTL_MS)
    redis_sync.rpush(keys.inbox, "12345:j1")
    t0 = server_ms(redis_sync)

    attempt = run(leases.lease_acquire(keys, TOKEN, 10 * TTL_MS))

    assert attempt.held is True and attempt.new is False and attempt.holder == TOKEN
    assert t0 <= attempt.server_now_ms <= server_ms(redis_sync)
    assert TTL_MS < redis_sync.pttl(keys.lease) <= 10 * TTL_MS
    assert TTL_MS < redis_sync.pttl(keys.horizon) <= 10 * TTL_MS
    assert redis_sync.get(keys.horizon) == b"12345"
    assert redis_sync.lrange(keys.inbox, 0, -1) == [b"12345:j1"]


def test_lease_acquire_of_a_lease_held_by_another_reports_the_holder_and_writes_nothing(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    run(leases.lease_acquire(keys, OTHER, TTL_MS))
    redis_sync.rpush(keys.inbox, "12345:j1")
    before = shard_state(redis_sync, keys)

    attempt = run(leases.lease_acquire(keys, TOKEN, 10 * TTL_MS))

    assert attempt.held is False and attempt.new is False and attempt.holder == OTHER
    assert shard_state(redis_sync, keys) == before
    assert redis_sync.pttl(keys.lease) <= TTL_MS


def renewal(redis_sync: redis.Redis, how: str) -> Callable[[ShardKeys, str, int], Call[bool]]:
    """The renewal call `how` names; skips ``ifeq`` on a server without SET ... IFEQ."""
    if how == "script":
        return leases.lease_renew
    try:
        redis_sync.execute_command("SET", "probe", "v", "IFEQ", "v")
    except redis.ResponseError as exc:
        assert leases.lacks_set_ifeq(exc), f"not the refusal lacks_set_ifeq knows: {exc}"
        pytest.skip("this server has no SET ... IFEQ (Redis < 8.4, Valkey < 8.1)")
    return leases.lease_renew_ifeq


@pytest.mark.parametrize("how", ["script", "ifeq"])
def test_lease_renew_of_our_lease_resets_its_ttl_and_leaves_the_horizon(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, how: str
) -> None:
    renew = renewal(redis_sync, how)
    run(leases.lease_acquire(keys, TOKEN, TTL_MS))

    assert run(renew(keys, TOKEN, 10 * TTL_MS)) is True

    assert TTL_MS < redis_sync.pttl(keys.lease) <= 10 * TTL_MS
    assert redis_sync.pttl(keys.horizon) <= TTL_MS, "the horizon expires on its own"
    assert redis_sync.get(keys.lease) == TOKEN.encode()


@pytest.mark.parametrize("how", ["script", "ifeq"])
@pytest.mark.parametrize("lease", ["held by another", "expired"])
def test_lease_renew_of_a_lease_not_ours_is_false_and_writes_nothing(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, lease: str, how: str
) -> None:
    renew = renewal(redis_sync, how)
    if lease == "held by another":
        run(leases.lease_acquire(keys, OTHER, TTL_MS))
    before = shard_state(redis_sync, keys)

    assert run(renew(keys, TOKEN, 10 * TTL_MS)) is False

    assert shard_state(redis_sync, keys) == before
    if lease == "held by another":
        assert redis_sync.pttl(keys.lease) <= TTL_MS
        assert redis_sync.pttl(keys.horizon) <= TTL_MS


def test_lease_release_of_our_lease_drops_lease_and_horizon(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    run(leases.lease_acquire(keys, TOKEN, TTL_MS))
    seed_pending(redis_sync, keys, "j1", server_ms(redis_sync) + MINUTE_MS, env())

    assert run(leases.lease_release(keys, TOKEN)) is True

    assert redis_sync.exists(keys.lease, keys.horizon) == 0
    assert score(redis_sync, keys, "j1") is not None  # jobs stay for the next leader
    assert run(leases.lease_acquire(keys, OTHER, TTL_MS)).new is True


@pytest.mark.parametrize("lease", ["held by another", "absent"])
def test_lease_release_of_a_lease_not_ours_is_false_and_writes_nothing(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, lease: str
) -> None:
    if lease == "held by another":
        run(leases.lease_acquire(keys, OTHER, TTL_MS))
    else:
        redis_sync.set(keys.horizon, "12345")  # a horizon without a lease is left alone too
    before = shard_state(redis_sync, keys)

    assert run(leases.lease_release(keys, TOKEN)) is False

    assert shard_state(redis_sync, keys) == before


# --- fast failover: marks, counts, reaps -------------------------------------------------------


def test_lease_followed_marks_only_the_holders_lease_and_unmarks_only_its_own_mark(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    run(leases.lease_acquire(keys, OTHER, TTL_MS))
    assert run(leases.lease_followed(keys, TOKEN, True)) is False  # not ours: nothing written
    assert redis_sync.exists(keys.followed) == 0
    assert run(leases.lease_followed(keys, OTHER, True)) is True
    assert redis_sync.get(keys.followed) == OTHER.encode()
    assert run(leases.lease_followed(keys, TOKEN, False)) is True  # another's mark: kept
    assert redis_sync.get(keys.followed) == OTHER.encode()
    assert run(leases.lease_followed(keys, OTHER, False)) is True
    assert redis_sync.exists(keys.followed) == 0


def test_a_new_leader_and_a_release_clear_the_mark(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    redis_sync.set(keys.followed, OTHER)  # left by a leader whose lease expired
    assert run(leases.lease_acquire(keys, TOKEN, TTL_MS)).new is True
    assert redis_sync.exists(keys.followed) == 0, "a new leader is not followed until it says"
    run(leases.lease_followed(keys, TOKEN, True))
    assert run(leases.lease_release(keys, TOKEN)) is True
    assert redis_sync.exists(keys.followed) == 0


def test_lease_watch_counts_this_servers_subscribers_of_each_channel(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, wake: PubSub
) -> None:
    other = ShardKeys(keys.topic, keys.shard + 1)
    counts = run(leases.lease_watch(keys, [keys.wake_channel, other.wake_channel]))
    assert counts == [1, 0]
    wake.sunsubscribe(keys.wake_channel)
    assert wake.get_message(timeout=5)["type"] == "sunsubscribe"
    assert run(leases.lease_watch(keys, [keys.wake_channel])) == [0]


GRACE_MS = 200


def test_lease_reap_frees_only_a_marked_lease_whose_channel_lost_its_subscriber(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, wake: PubSub
) -> None:
    assert run(leases.lease_reap(keys, GRACE_MS)) == leases.Reap(leases.Reaped.FREE, "")
    run(leases.lease_acquire(keys, OTHER, TTL_MS))
    # Not marked yet (a new leader subscribing): alive, whatever the count.
    wake.sunsubscribe(keys.wake_channel)
    assert wake.get_message(timeout=5)["type"] == "sunsubscribe"
    before = shard_state(redis_sync, keys)
    assert run(leases.lease_reap(keys, GRACE_MS)) == leases.Reap(leases.Reaped.ALIVE, OTHER)
    assert shard_state(redis_sync, keys) == before
    # Marked, and subscribed: alive.
    wake.ssubscribe(keys.wake_channel)
    assert wake.get_message(timeout=5)["type"] == "ssubscribe"
    run(leases.lease_followed(keys, OTHER, True))
    before = shard_state(redis_sync, keys)
    assert run(leases.lease_reap(keys, GRACE_MS)) == leases.Reap(leases.Reaped.ALIVE, OTHER)
    assert shard_state(redis_sync, keys) == before
    # Marked by an earlier leader, not this one: alive (its TTL decides).
    redis_sync.set(keys.followed, TOKEN)
    wake.sunsubscribe(keys.wake_channel)
    assert wake.get_message(timeout=5)["type"] == "sunsubscribe"
    assert run(leases.lease_reap(keys, GRACE_MS)).state is leases.Reaped.ALIVE
    assert redis_sync.get(keys.followed) == TOKEN.encode()
    # Marked by the holder, and no subscriber left: its grace starts, then it is freed.
    redis_sync.set(keys.followed, OTHER)
    assert gone_for_the_grace(redis_sync, run, keys) == leases.Reap(leases.Reaped.FREED, OTHER)
    assert redis_sync.exists(keys.lease, keys.followed, keys.horizon) == 0
    assert run(leases.lease_acquire(keys, TOKEN, TTL_MS)).new is True
    assert run(leases.lease_reap(keys, GRACE_MS)).state is leases.Reaped.ALIVE  # no harm


def gone_for_the_grace(redis_sync: redis.Redis, run: Runner, keys: ShardKeys) -> leases.Reap:
    """Reap a marked shard without subscriber: the first call starts the grace (stamps the
    mark with the Redis time) and frees nothing, nor does any call before the grace is over,
    nor one after it that does not name the holder gone; returns the reply of the first call
    after it that does."""
    before = shard_state(redis_sync, keys)
    first = run(leases.lease_reap(keys, GRACE_MS))
    holder = redis_sync.get(keys.lease).decode()
    assert first == leases.Reap(leases.Reaped.GONE, holder, GRACE_MS)
    token, since = redis_sync.get(keys.followed).decode().rsplit(" ", 1)
    assert token == holder and abs(int(since) - server_ms(redis_sync)) < 1000
    assert {k: v for k, v in shard_state(redis_sync, keys).items() if k != "followed"} == {
        k: v for k, v in before.items() if k != "followed"
    }
    again = run(leases.lease_reap(keys, GRACE_MS))
    assert again.state is leases.Reaped.GONE and 0 < again.wait_ms <= GRACE_MS
    eventually_sync(
        lambda: server_ms(redis_sync) > int(since) + GRACE_MS, timeout_s=5, what="the grace"
    )
    before = shard_state(redis_sync, keys)
    for named in ("", TOKEN if holder != TOKEN else OTHER):  # its process not seen gone
        assert run(leases.lease_reap(keys, GRACE_MS, named)) == leases.Reap(
            leases.Reaped.OVER, holder
        )
    assert shard_state(redis_sync, keys) == before
    return run(leases.lease_reap(keys, GRACE_MS, holder))


def test_a_leader_registered_again_or_back_within_the_grace_keeps_its_lease(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, wake: PubSub
) -> None:
    """The grace ends only for a liveness connection gone all along: a leader that registers
    again (a plain mark) or whose subscriber is back before the grace is over keeps its lease,
    and a later loss starts a whole grace of its own."""
    run(leases.lease_acquire(keys, OTHER, TTL_MS))
    run(leases.lease_followed(keys, OTHER, True))
    wake.sunsubscribe(keys.wake_channel)
    assert wake.get_message(timeout=5)["type"] == "sunsubscribe"
    assert run(leases.lease_reap(keys, GRACE_MS)).state is leases.Reaped.GONE
    # Its process reconnected and registered again: the grace is over, the lease is kept.
    run(leases.lease_followed(keys, OTHER, True))
    assert redis_sync.get(keys.followed) == OTHER.encode()
    grace_ms(redis_sync)
    assert run(leases.lease_reap(keys, GRACE_MS)).state is leases.Reaped.GONE, "a new grace"
    # Its subscriber is back (not registered yet): alive, and the stamp is cleared.
    wake.ssubscribe(keys.wake_channel)
    assert wake.get_message(timeout=5)["type"] == "ssubscribe"
    grace_ms(redis_sync)
    assert run(leases.lease_reap(keys, GRACE_MS)) == leases.Reap(leases.Reaped.ALIVE, OTHER)
    assert redis_sync.get(keys.followed) == OTHER.encode()
    wake.sunsubscribe(keys.wake_channel)
    assert wake.get_message(timeout=5)["type"] == "sunsubscribe"
    assert gone_for_the_grace(redis_sync, run, keys).state is leases.Reaped.FREED


def test_a_leader_unmarks_a_mark_its_grace_stamped(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, wake: PubSub
) -> None:
    run(leases.lease_acquire(keys, OTHER, TTL_MS))
    run(leases.lease_followed(keys, OTHER, True))
    wake.sunsubscribe(keys.wake_channel)
    assert wake.get_message(timeout=5)["type"] == "sunsubscribe"
    assert run(leases.lease_reap(keys, GRACE_MS)).state is leases.Reaped.GONE
    assert run(leases.lease_followed(keys, TOKEN, False)) is True  # another's: kept
    assert redis_sync.get(keys.followed).startswith(OTHER.encode() + b" ")
    assert run(leases.lease_followed(keys, OTHER, False)) is True
    assert redis_sync.exists(keys.followed) == 0
    grace_ms(redis_sync)
    assert run(leases.lease_reap(keys, GRACE_MS)) == leases.Reap(leases.Reaped.ALIVE, OTHER)


def grace_ms(redis_sync: redis.Redis) -> None:
    """Wait out a grace on the Redis clock."""
    start = server_ms(redis_sync)
    eventually_sync(
        lambda: server_ms(redis_sync) > start + GRACE_MS, timeout_s=5, what="a grace to pass"
    )


# --- NOSCRIPT recovery ----------------------------------------------------------------------


def test_executor_reloads_scripts_after_script_flush(
    server_binary: ServerBinary, topic: str
) -> None:
    keys = ShardKeys(topic, 0)
    with dedicated_server(server_binary) as server:
        client = redis.Redis.from_url(server.url)
        try:
            executor = SyncExecutor(client)
            sha = script("enqueue").sha
            due = server_ms(client) + MINUTE_MS

            # First use on a fresh server: NOSCRIPT, load, send again.
            assert client.script_exists(sha) == [False]
            assert executor.run([enqueue.enqueue(keys, [job("a", at(due))])]) == [
                [Placed.SCHEDULED]
            ]

            client.script_flush()
            assert client.script_exists(sha) == [False]
            assert executor.run([enqueue.enqueue(keys, [job("b", at(due))])]) == [
                [Placed.SCHEDULED]
            ]
            assert client.script_exists(sha) == [True]

            # A pipeline of scripts and a plain command after a flush: only the scripts are
            # sent again, each exactly once.
            client.script_flush()
            replies = executor.run(
                [
                    enqueue.cancel(keys, "a"),
                    observe.pending_count(keys),
                    enqueue.enqueue(keys, [job("c", DueSpec("delay", 0))]),
                    leases.lease_acquire(keys, TOKEN, TTL_MS),
                ]
            )
            assert replies[0] is True
            # The plain command ran in the first round trip, before the retried cancel.
            assert replies[1] == 2
            assert replies[2] == [Placed.FIRED]
            assert replies[3].held is True and replies[3].new is True
            assert client.zrange(keys.delayed, 0, -1) == [b"b"]
            assert client.xlen(keys.ready) == 1
        finally:
            client.close()
