"""The consuming side's Lua scripts called directly on a real server: retry, dead_letter, claim,
touch, trim and replay, plus purge_dead.

Calls go through the typed wrappers of `wheelq.store` (`settle`, `consume`, `history`,
`dead_letters`) and `SyncExecutor`, as a worker sends them; setup (entries, deliveries,
acks) is raw Redis. Idle times and delivery counts are set with XCLAIM ... IDLE /
RETRYCOUNT, and entries to trim carry explicit ids in the past, so no test sleeps or
depends on timing. Due times are checked against the server's TIME read
before and after the call.
"""

from __future__ import annotations

import itertools
import random
import re
from typing import Any

import msgpack
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.client import PubSub

from tests.support.entries import ENQUEUED_MS, dead_annotations, dead_fields, ready_fields
from tests.support.scripts import RAW_PAYLOAD, Runner
from wheelq.core.due import DueSpec
from wheelq.core.history import pack_success, unpack_record
from wheelq.core.job import Envelope, Field
from wheelq.core.keys import ShardKeys
from wheelq.errors import ScriptError
from wheelq.store import consume, dead_letters, enqueue, fire, history, settle, streams
from wheelq.store.scripts import Placed

pytestmark = pytest.mark.both_servers  # the Lua scripts, called directly

GROUP = "g"
OTHER_GROUP = "h"
WORKER = "worker-1"
OTHER_WORKER = "worker-2"
TOKEN = "node-a:1"
MINUTE_MS = 60_000
HOUR_MS = 3_600_000
TEN_YEARS_MS = 10 * 365 * 86_400_000
US = "\x1f"


# --- helpers --------------------------------------------------------------------------------


def server_ms(r: redis.Redis) -> int:
    sec, usec = r.time()
    return int(sec) * 1000 + int(usec) // 1000


def add(r: redis.Redis, keys: ShardKeys, fields: dict[bytes, bytes], entry_id: str = "*") -> str:
    return r.xadd(keys.ready, fields, id=entry_id).decode()


def deliver(
    r: redis.Redis, keys: ShardKeys, group: str, consumer: str, count: int = 1000
) -> list[str]:
    """XREADGROUP new entries to `consumer`; their ids."""
    reply = r.xreadgroup(group, consumer, {keys.ready: ">"}, count=count)
    return [eid.decode() for _, batch in reply for eid, _ in batch]


def pending(r: redis.Redis, keys: ShardKeys, group: str) -> dict[str, dict[str, Any]]:
    """The group's pending entries: id -> XPENDING row (consumer, idle, delivery count)."""
    rows = r.xpending_range(keys.ready, group, "-", "+", 10_000)
    return {row["message_id"].decode(): row for row in rows}


def set_pending(
    r: redis.Redis,
    keys: ShardKeys,
    entry_id: str,
    consumer: str,
    idle_ms: int = 0,
    deliveries: int | None = None,
) -> None:
    """Give a pending entry an owner, an idle time and (optionally) a delivery count."""
    r.xclaim(
        keys.ready, GROUP, consumer, 0, [entry_id], idle=idle_ms, retrycount=deliveries, justid=True
    )


def ids_of(r: redis.Redis, key: str) -> list[str]:
    return [eid.decode() for eid, _ in r.xrange(key)]


def old_entries(r: redis.Redis, keys: ShardKeys, n: int, age_ms: int = HOUR_MS) -> list[str]:
    """`n` entries with explicit ids `age_ms` ago (so retention 0 covers them)."""
    base = server_ms(r) - age_ms
    return [
        add(r, keys, ready_fields(f"j{i}", topic=keys.topic), f"{base + i}-0") for i in range(n)
    ]


def snapshot(r: redis.Redis, keys: ShardKeys) -> dict[str, Any]:
    """Type and content of every shard key, and each group's pending entries (without idle
    times), for "nothing changed" checks."""
    readers: dict[bytes, Any] = {
        b"zset": lambda k: r.zrange(k, 0, -1, withscores=True),
        b"hash": r.hgetall,
        b"stream": r.xrange,
        b"list": lambda k: r.lrange(k, 0, -1),
        b"string": r.get,
    }
    state: dict[str, Any] = {}
    for key in keys.data_keys:
        kind = r.type(key)
        state[key] = (kind, readers.get(kind, lambda k: None)(key))
    if r.type(keys.ready) == b"stream":
        for group in r.xinfo_groups(keys.ready):
            name = group["name"].decode()
            state[f"pending {name}"] = {
                eid: (row["consumer"], row["times_delivered"])
                for eid, row in pending(r, keys, name).items()
            }
    return state


def plant_wrong_type(r: redis.Redis, key: str) -> None:
    if r.type(key) == b"string":
        r.delete(key)
        r.rpush(key, "not a string")
    else:
        r.set(key, "wrong type")


# --- ack (successes, with history records) -------------------------------------------------


def record(r: redis.Redis, keys: ShardKeys, job_id: str, group: str = GROUP) -> list[Any] | None:
    raw = r.hget(keys.history, f"{job_id}{US}{group}")
    return None if raw is None else unpack_record(raw)


def test_ack_acks_every_entry_and_records_each_success(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    run(consume.create_group(keys, GROUP))
    entries = [add(redis_sync, keys, ready_fields(f"j{i}", topic=keys.topic)) for i in range(3)]
    deliver(redis_sync, keys, GROUP, WORKER)
    runs = [(e, f"j{i}", 1000 + i, 10 * i, None, 1) for i, e in enumerate(entries)]

    assert run(settle.ack_done(keys, GROUP, [])) == 0  # nothing to ack: no error either
    assert run(settle.ack_done(keys, GROUP, runs)) == 3

    assert pending(redis_sync, keys, GROUP) == {}
    for entry, job_id, ended, took, _, _ in runs:
        assert record(redis_sync, keys, job_id) == ["S", entry, ended, took, "", "", ""]


def test_ack_records_run_times_of_every_size_in_whole_ms(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    # Success records are packed in Python (store.settle): they must read as wq_record's do.
    took = [-5, 0, 127, 128, 70_000, 2**32 + 5]  # -5: the wall clock stepped back
    kept = [0, 0, 127, 128, 70_000, 2**32 - 1]  # (2**32 ms: 49 days, the most a record holds)
    ended = 1_763_000_000_123
    run(consume.create_group(keys, GROUP))
    entries = [
        add(redis_sync, keys, ready_fields(f"j{i}", topic=keys.topic)) for i in range(len(took))
    ]
    deliver(redis_sync, keys, GROUP, WORKER)

    runs = [(e, f"j{i}", ended, took[i], None, 1) for i, e in enumerate(entries)]
    assert run(settle.ack_done(keys, GROUP, runs)) == len(took)

    for i, entry in enumerate(entries):
        rec = record(redis_sync, keys, f"j{i}")
        assert rec == ["S", entry, ended, kept[i], "", "", ""]
        assert type(rec[2]) is int and type(rec[3]) is int


def test_ack_leaves_the_record_of_an_entry_someone_else_settled(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    run(consume.create_group(keys, GROUP))
    entries = [add(redis_sync, keys, ready_fields(f"j{i}", topic=keys.topic)) for i in range(3)]
    deliver(redis_sync, keys, GROUP, WORKER)
    # j1 was taken over and retried by another worker before this one's ack arrived.
    retried = settle.retry(keys, GROUP, entries[1], "j1", MINUTE_MS, next_attempt().pack(), "boom")
    assert run(retried).done
    runs = [(e, f"j{i}", 1000, 5, None, 1) for i, e in enumerate(entries)]

    assert run(settle.ack_done(keys, GROUP, runs)) == 2

    other = record(redis_sync, keys, "j1")
    assert other is not None and other[:2] == ["R", entries[1]] and other[4] == "boom"
    for i in (0, 2):
        assert record(redis_sync, keys, f"j{i}") == ["S", entries[i], 1000, 5, "", "", ""]
    # Sent again (its reply lost): nothing more is acked, the records stay as they are.
    before = snapshot(redis_sync, keys)
    assert run(settle.ack_done(keys, GROUP, runs)) == 0
    assert snapshot(redis_sync, keys) == before


def test_ack_keeps_results_and_counts_their_bytes_toward_the_history_budget(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    """MEMORY USAGE samples a hash: a few large results among many small records would go
    unseen, so each generation counts the results' bytes and trim adds them."""
    run(consume.create_group(keys, GROUP))
    entries = [add(redis_sync, keys, ready_fields(f"j{i}", topic=keys.topic)) for i in range(400)]
    deliver(redis_sync, keys, GROUP, WORKER)
    big = msgpack.packb("x" * 60_000)
    runs = [
        (e, f"j{i}", 1000, 5, big if i in (150, 250) else None, 1) for i, e in enumerate(entries)
    ]
    assert run(settle.ack_done(keys, GROUP, runs)) == 400

    assert record(redis_sync, keys, "j150") == ["S", entries[150], 1000, 5, "", "", "", big]
    assert record(redis_sync, keys, "j1") == ["S", entries[1], 1000, 5, "", "", ""]
    counted = int(redis_sync.hget(keys.history, "\x1fresults") or 0)
    assert counted == 2 * len(big)
    # Every field measured, less the counted results: about what trim's MEMORY USAGE sees
    # when its sample of 5 fields misses the 2 large ones among 400 (it mostly does; the test
    # once took its own sample, which saw them 1 time in 40). A budget that size keeps clear
    # of, by half the results' bytes, and the counted results put over: trim trims.
    exact = sum(redis_sync.memory_usage(k, samples=0) or 0 for k in (keys.ready, keys.history))
    unseen = exact - counted
    budget = int((unseen + counted / 2) / 0.9)
    assert run(history.trim(keys, HOUR_MS, 1000, HOUR_MS, budget)).trimmed > 0


def test_a_late_ack_leaves_the_first_successs_record_and_result(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    """A stale worker's ack (it was stopped, its entry taken over and acked with a result)
    replaced the settled result: the first settlement must stand."""
    run(consume.create_group(keys, GROUP))
    entries = [add(redis_sync, keys, ready_fields(f"j{i}", topic=keys.topic)) for i in range(2)]
    deliver(redis_sync, keys, GROUP, WORKER)
    first = msgpack.packb({"by": "b", "raw": b"\x00\xff"})  # not UTF-8, as results may be
    late = msgpack.packb({"by": "a", "raw": b"\xfe"})
    assert run(settle.ack_done(keys, GROUP, [(entries[1], "j1", 1000, 5, first, 1)])) == 1
    kept = ["S", entries[1], 1000, 5, "", "", "", first]
    assert record(redis_sync, keys, "j1") == kept

    # The stale worker's ack, alone and in a batch with an entry still pending to it.
    assert run(settle.ack_done(keys, GROUP, [(entries[1], "j1", 2000, 9, late, 1)])) == 0
    runs = [(entries[0], "j0", 2000, 9, None, 1), (entries[1], "j1", 2000, 9, late, 1)]
    assert run(settle.ack_done(keys, GROUP, runs)) == 1

    assert record(redis_sync, keys, "j1") == kept
    assert record(redis_sync, keys, "j0") == ["S", entries[0], 2000, 9, "", "", ""]


def test_an_ack_of_a_retrys_firing_records_its_result_when_another_entry_was_settled(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    """A retry's firing leaves an 'F' record naming its entry: an ack of that entry in a
    batch where another was settled before must still write the success and its result."""
    run(consume.create_group(keys, GROUP))
    entries = [
        add(redis_sync, keys, ready_fields(f"j{i}", topic=keys.topic, attempt=2)) for i in range(2)
    ]
    deliver(redis_sync, keys, GROUP, WORKER)
    fired = msgpack.packb(["F", entries[1], 0, 0, "boom", "", ""])
    redis_sync.hset(keys.history, f"j1{US}{GROUP}", fired)  # as emit_due writes it
    settled = pack_success(entries[0], 500, 1, None)
    assert run(settle.ack_done(keys, GROUP, [(entries[0], "j0", 500, 1, None, 2)])) == 1
    result = msgpack.packb("done on attempt 2")

    runs = [(entries[0], "j0", 1000, 5, None, 2), (entries[1], "j1", 1000, 5, result, 2)]
    assert run(settle.ack_done(keys, GROUP, runs)) == 1

    assert record(redis_sync, keys, "j1") == ["S", entries[1], 1000, 5, "", "", "", result]
    assert redis_sync.hget(keys.history, f"j0{US}{GROUP}") == settled


# --- retry ----------------------------------------------------------------------------------


def next_attempt(job_id: str = "j1", payload: bytes = b"p", attempt: int = 2) -> Envelope:
    """The envelope a worker sends with a retry: next attempt, its group, the job id."""
    return Envelope(payload, attempt, 5, ENQUEUED_MS, GROUP, job_id)


@pytest.fixture
def delivered(redis_sync: redis.Redis, run: Runner, keys: ShardKeys) -> str:
    """Job j1's entry (attempt 1), delivered to WORKER in GROUP and pending there."""
    run(consume.create_group(keys, GROUP))
    entry = add(redis_sync, keys, ready_fields("j1", topic=keys.topic, payload=RAW_PAYLOAD))
    assert deliver(redis_sync, keys, GROUP, WORKER) == [entry]
    return entry


def test_retry_acks_the_entry_and_schedules_the_job_at_time_plus_delay(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, delivered: str
) -> None:
    before = server_ms(redis_sync)
    retried = run(settle.retry(keys, GROUP, delivered, "j1", MINUTE_MS, next_attempt().pack()))
    after = server_ms(redis_sync)

    assert retried.done and retried.member == "j1"
    assert before + MINUTE_MS <= retried.due_ms <= after + MINUTE_MS
    assert redis_sync.zscore(keys.delayed, "j1") == retried.due_ms
    assert pending(redis_sync, keys, GROUP) == {}
    assert ids_of(redis_sync, keys.ready) == [delivered]  # acked, not deleted


def test_retry_stores_the_envelope_of_the_next_attempt(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, delivered: str
) -> None:
    envelope = next_attempt(payload=RAW_PAYLOAD, attempt=2)
    run(settle.retry(keys, GROUP, delivered, "j1", MINUTE_MS, envelope.pack()))

    stored = Envelope.unpack(redis_sync.hget(keys.jobs, "j1"))
    assert (stored.attempt, stored.group, stored.job_id) == (2, GROUP, "j1")
    assert stored.payload == RAW_PAYLOAD


@pytest.mark.parametrize("state", ["acked", "never delivered", "pending in another group"])
def test_retry_of_an_entry_not_pending_in_the_group_is_not_done_and_writes_nothing(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, state: str
) -> None:
    run(consume.create_group(keys, GROUP))
    run(consume.create_group(keys, OTHER_GROUP))
    entry = add(redis_sync, keys, ready_fields("j1", topic=keys.topic))
    redis_sync.set(keys.horizon, server_ms(redis_sync) + HOUR_MS)  # a write would leave a note
    if state == "acked":
        deliver(redis_sync, keys, GROUP, WORKER)
        redis_sync.xack(keys.ready, GROUP, entry)
    elif state == "pending in another group":
        deliver(redis_sync, keys, OTHER_GROUP, WORKER)
    before = snapshot(redis_sync, keys)

    retried = run(settle.retry(keys, GROUP, entry, "j1", MINUTE_MS, next_attempt().pack()))

    assert retried == settle.Retried(False)
    assert snapshot(redis_sync, keys) == before


def test_retry_while_the_job_id_is_pending_again_uses_a_member_of_its_own(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, delivered: str
) -> None:
    later = server_ms(redis_sync) + HOUR_MS
    pending_envelope = Envelope(b"enqueued again", 1, 5, ENQUEUED_MS).pack()
    redis_sync.hset(keys.jobs, "j1", pending_envelope)
    redis_sync.zadd(keys.delayed, {"j1": later})

    retried = run(settle.retry(keys, GROUP, delivered, "j1", MINUTE_MS, next_attempt().pack()))

    member = f"j1{US}{GROUP}{US}{delivered}"
    assert retried.done and retried.member == member
    assert redis_sync.zscore(keys.delayed, member) == retried.due_ms
    assert Envelope.unpack(redis_sync.hget(keys.jobs, member)).job_id == "j1"
    assert redis_sync.zscore(keys.delayed, "j1") == later
    assert redis_sync.hget(keys.jobs, "j1") == pending_envelope


@pytest.mark.parametrize("fallback", [False, True], ids=["own member", "fallback member"])
def test_retry_below_the_horizon_leaves_an_inbox_note_and_publishes_it(
    redis_sync: redis.Redis,
    run: Runner,
    keys: ShardKeys,
    wake: PubSub,
    delivered: str,
    fallback: bool,
) -> None:
    redis_sync.set(keys.horizon, server_ms(redis_sync) + HOUR_MS)
    if fallback:
        redis_sync.hset(keys.jobs, "j1", Envelope(b"again", 1, 5, ENQUEUED_MS).pack())

    retried = run(settle.retry(keys, GROUP, delivered, "j1", MINUTE_MS, next_attempt().pack()))

    note = f"{retried.due_ms}:{retried.member}".encode()
    assert redis_sync.lrange(keys.inbox, 0, -1) == [note]
    message = wake.get_message(timeout=5)
    assert message is not None and message["data"] == note


@pytest.mark.parametrize("horizon", ["below due", "absent"])
def test_retry_above_the_horizon_or_without_one_leaves_no_note(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, delivered: str, horizon: str
) -> None:
    if horizon == "below due":
        redis_sync.set(keys.horizon, server_ms(redis_sync) + MINUTE_MS // 2)

    retried = run(settle.retry(keys, GROUP, delivered, "j1", MINUTE_MS, next_attempt().pack()))

    assert retried.done
    assert redis_sync.exists(keys.inbox) == 0


@pytest.mark.parametrize("name", ["delayed", "jobs", "ready", "horizon", "inbox", "retries"])
def test_retry_key_of_wrong_type_is_a_script_error_and_writes_nothing(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, name: str
) -> None:
    entry = "1-0"
    if name != "ready":
        run(consume.create_group(keys, GROUP))
        entry = add(redis_sync, keys, ready_fields("j1", topic=keys.topic))
        deliver(redis_sync, keys, GROUP, WORKER)
        redis_sync.set(keys.horizon, server_ms(redis_sync) + HOUR_MS)
    bad = getattr(keys, name)
    plant_wrong_type(redis_sync, bad)
    before = snapshot(redis_sync, keys)

    with pytest.raises(ScriptError, match=re.escape(f"retry.lua: key '{bad}' holds a value")):
        run(settle.retry(keys, GROUP, entry, "j1", 0, next_attempt().pack()))

    assert snapshot(redis_sync, keys) == before


@pytest.mark.parametrize("fallback", [False, True], ids=["own member", "fallback member"])
def test_retried_job_is_emitted_with_its_original_id_attempt_and_group(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, delivered: str, fallback: bool
) -> None:
    if fallback:
        redis_sync.hset(keys.jobs, "j1", Envelope(b"again", 1, 5, ENQUEUED_MS).pack())
        redis_sync.zadd(keys.delayed, {"j1": server_ms(redis_sync) + HOUR_MS})
    retried = run(
        settle.retry(keys, GROUP, delivered, "j1", 0, next_attempt(payload=RAW_PAYLOAD).pack())
    )
    redis_sync.set(keys.lease, TOKEN)

    emitted = run(fire.emit_due(keys, TOKEN, server_ms(redis_sync), [retried.member]))

    assert emitted.emitted == 1
    _, fields = redis_sync.xrange(keys.ready)[-1]
    assert fields == {
        **ready_fields(
            "j1", topic=keys.topic, attempt=2, payload=RAW_PAYLOAD, due_ms=retried.due_ms
        ),
        Field.GROUP: GROUP.encode(),
    }
    assert redis_sync.zscore(keys.delayed, retried.member) is None
    assert (redis_sync.zscore(keys.delayed, "j1") is not None) == fallback


# --- retries of one id in several groups: the alias index, cancel, reschedule ---------------


def retried_in_two_groups(r: redis.Redis, run: Runner, keys: ShardKeys) -> tuple[str, str]:
    """j1 fired once and failed in GROUP and OTHER_GROUP: GROUP's retry waits under the id,
    OTHER_GROUP's under an alias member (the id was taken). Returns (entry, alias)."""
    run(consume.create_group(keys, GROUP))
    run(consume.create_group(keys, OTHER_GROUP))
    entry = add(r, keys, ready_fields("j1", topic=keys.topic))
    for group in (GROUP, OTHER_GROUP):
        assert deliver(r, keys, group, WORKER) == [entry]
        envelope = Envelope(b"p", 2, 5, ENQUEUED_MS, group, "j1").pack()
        run(settle.retry(keys, group, entry, "j1", HOUR_MS, envelope, f"boom in {group}", 7))
    alias = f"j1{US}{OTHER_GROUP}{US}{entry}"
    assert r.zscore(keys.delayed, "j1") is not None and r.zscore(keys.delayed, alias) is not None
    return entry, alias


def seed_neighbours(r: redis.Redis, keys: ShardKeys) -> list[str]:
    """Aliases of other ids next to j1's in lex order (j, j10): never touched for j1."""
    near = []
    for job_id in ("j", "j10"):
        member = f"{job_id}{US}{GROUP}{US}1-0"
        r.zadd(keys.retries, {member: 0})
        r.zadd(keys.delayed, {member: server_ms(r) + HOUR_MS})
        r.hset(keys.jobs, member, Envelope(b"n", 2, 5, ENQUEUED_MS, GROUP, job_id).pack())
        near.append(member)
    return near


def members_left(r: redis.Redis, keys: ShardKeys) -> tuple[list[str], list[str], list[str]]:
    """The members of the sorted set, the envelope hash and the alias index, sorted."""
    return (
        sorted(m.decode() for m in r.zrange(keys.delayed, 0, -1)),
        sorted(m.decode() for m in r.hkeys(keys.jobs)),
        sorted(m.decode() for m in r.zrange(keys.retries, 0, -1)),
    )


def test_a_retry_under_an_alias_member_is_indexed_and_leaves_the_index_as_it_fires(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    _, alias = retried_in_two_groups(redis_sync, run, keys)
    # every pending retry is in the index: the one under the id and the one under an alias
    indexed = redis_sync.zrange(keys.retries, 0, -1, withscores=True)
    assert indexed == [(b"j1", 0.0), (alias.encode(), 0.0)]

    redis_sync.set(keys.lease, TOKEN)
    redis_sync.zadd(keys.delayed, {"j1": 1, alias: 1})
    assert run(fire.emit_due(keys, TOKEN, server_ms(redis_sync), limit=10)).emitted == 2

    assert redis_sync.exists(keys.retries, keys.delayed, keys.jobs) == 0


def test_cancel_removes_every_groups_retry_of_the_id_and_marks_their_records_cancelled(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    r = redis_sync
    entry, _ = retried_in_two_groups(r, run, keys)
    near = seed_neighbours(r, keys)
    before = server_ms(r)

    assert run(enqueue.cancel(keys, "j1")) is True

    assert members_left(r, keys) == (near, near, near)  # the neighbours' untouched
    assert r.zscore(keys.cancelled, "j1") is not None
    for group in (GROUP, OTHER_GROUP):
        rec = record(r, keys, "j1", group)
        assert rec is not None
        assert (rec[0], rec[1], rec[4]) == ("C", entry, f"boom in {group}")
        assert rec[2] >= before
    assert run(enqueue.cancel(keys, "j1")) is False  # nothing of j1 is pending any more


def test_cancel_of_an_id_whose_only_pending_attempt_is_an_alias_retry_cancels_it(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    r = redis_sync
    retried_in_two_groups(r, run, keys)
    r.zrem(keys.delayed, "j1")  # GROUP's retry fired: OTHER_GROUP's alone waits
    r.hdel(keys.jobs, "j1")

    assert run(enqueue.cancel(keys, "j1")) is True

    assert members_left(r, keys) == ([], [], [])
    rec = record(r, keys, "j1", OTHER_GROUP)
    assert rec is not None and rec[0] == "C"


def cancel_pending_j1(r: redis.Redis, run: Runner, keys: ShardKeys) -> None:
    """j1 enqueued again (due in an hour), then cancelled: the cancel answers True."""
    r.zadd(keys.delayed, {"j1": server_ms(r) + HOUR_MS})
    r.hset(keys.jobs, "j1", Envelope(b"p", 1, 5, ENQUEUED_MS).pack())
    assert run(enqueue.cancel(keys, "j1")) is True


def test_an_attempt_fired_before_a_cancel_is_acked_not_retried_past_a_generation_turn(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, delivered: str
) -> None:
    r = redis_sync
    cancel_pending_j1(r, run, keys)
    r.rename(keys.history, keys.history_old)  # trim turned the generation since the cancel

    got = run(settle.retry(keys, GROUP, delivered, "j1", 0, next_attempt().pack(), "boom", 1234))

    assert got == settle.Retried(False, cancelled=True)
    assert pending(r, keys, GROUP) == {}
    assert r.exists(keys.delayed, keys.jobs, keys.retries) == 0
    assert record(r, keys, "j1") == ["C", delivered, 1234, 0, "boom", "", ""]
    # The id enqueued again fires past the fence: a failure of that job is retried.
    later = add(r, keys, ready_fields("j1", topic=keys.topic))
    assert deliver(r, keys, GROUP, WORKER) == [later]
    again = settle.retry(keys, GROUP, later, "j1", MINUTE_MS, next_attempt().pack(), "boom")
    assert run(again).done
    assert r.zrange(keys.retries, 0, -1) == [b"j1"]


def test_a_cancel_fence_goes_with_its_history_once_the_entries_it_fences_are_trimmed(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, delivered: str
) -> None:
    r = redis_sync
    cancel_pending_j1(r, run, keys)
    fence = f"j1{US}"
    assert r.hget(keys.history, fence) == f"{delivered} 0-0".encode()
    for _ in range(3):  # pending: the entry, its generation and the fence are kept
        run(history.trim(keys, 0, 1000, HOUR_MS, 1))
    assert ids_of(r, keys.ready) == [delivered]
    assert fence.encode() in r.hkeys(keys.history) + r.hkeys(keys.history_old)

    assert run(settle.ack_done(keys, GROUP, [(delivered, "j1", 1000, 5, None, 1)])) == 1
    for _ in range(3):
        run(history.trim(keys, 0, 1000, HOUR_MS, 1))

    assert ids_of(r, keys.ready) == []
    assert fence.encode() not in r.hkeys(keys.history) + r.hkeys(keys.history_old)


def test_reschedule_moves_every_groups_retry_of_the_id(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    r = redis_sync
    _, alias = retried_in_two_groups(r, run, keys)
    near = seed_neighbours(r, keys)
    due = server_ms(r) + 2 * HOUR_MS

    assert run(enqueue.reschedule(keys, "j1", DueSpec("at", due))) == Placed.SCHEDULED

    assert (r.zscore(keys.delayed, "j1"), r.zscore(keys.delayed, alias)) == (due, due)
    assert all(r.zscore(keys.delayed, m) != due for m in near)
    assert r.zscore(keys.retries, alias) == 0  # still waiting under its alias


def test_reschedule_to_now_fires_every_groups_retry_in_its_own_group(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    r = redis_sync
    entry, _ = retried_in_two_groups(r, run, keys)
    near = seed_neighbours(r, keys)

    assert run(enqueue.reschedule(keys, "j1", DueSpec("delay", 0))) == Placed.FIRED

    fired = [fields for eid, fields in r.xrange(keys.ready) if eid.decode() != entry]
    assert sorted((f[Field.ID], f[Field.ATTEMPT], f[Field.GROUP]) for f in fired) == [
        (b"j1", b"2", GROUP.encode()),
        (b"j1", b"2", OTHER_GROUP.encode()),
    ]
    assert members_left(r, keys) == (near, near, near)
    assert r.zscore(keys.cancelled, "j1") is None


@pytest.mark.parametrize("script", ["cancel", "reschedule"])
def test_cancel_and_reschedule_with_a_wrong_typed_alias_index_raise_and_write_nothing(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, script: str
) -> None:
    retried_in_two_groups(redis_sync, run, keys)
    redis_sync.delete(keys.retries)
    redis_sync.set(keys.retries, "wrong type")
    before = snapshot(redis_sync, keys)
    call = (
        enqueue.cancel(keys, "j1")
        if script == "cancel"
        else enqueue.reschedule(keys, "j1", DueSpec("delay", 0))
    )

    with pytest.raises(ScriptError, match=re.escape(f"{script}.lua: key '{keys.retries}'")):
        run(call)

    assert snapshot(redis_sync, keys) == before


# --- dead_letter ----------------------------------------------------------------------------


def dead_entries(r: redis.Redis, keys: ShardKeys) -> list[dict[bytes, bytes]]:
    return [fields for _, fields in r.xrange(keys.dead)]


def test_dead_letter_copies_the_entry_with_why_and_acks_it(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, delivered: str
) -> None:
    assert run(settle.dead_letter(keys, GROUP, [(delivered, "failed", "boom\ntrace")])) == 1

    [dead] = dead_entries(redis_sync, keys)
    original = ready_fields("j1", topic=keys.topic, payload=RAW_PAYLOAD)
    expected = dead_fields(
        "j1", topic=keys.topic, payload=RAW_PAYLOAD, error="boom\ntrace", entry=delivered
    )
    assert dead == expected
    assert list(dead)[: len(original)] == list(original)  # original fields first, in order
    assert pending(redis_sync, keys, GROUP) == {}


@pytest.mark.parametrize("state", ["acked", "never delivered"])
def test_dead_letter_skips_entries_not_pending_in_the_group(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, state: str
) -> None:
    run(consume.create_group(keys, GROUP))
    entry = add(redis_sync, keys, ready_fields(topic=keys.topic))
    if state == "acked":
        deliver(redis_sync, keys, GROUP, WORKER)
        redis_sync.xack(keys.ready, GROUP, entry)
    before = snapshot(redis_sync, keys)

    assert run(settle.dead_letter(keys, GROUP, [(entry, "failed", "boom")])) == 0

    assert snapshot(redis_sync, keys) == before
    assert redis_sync.exists(keys.dead) == 0


def test_dead_letter_handles_several_entries_in_one_call(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    run(consume.create_group(keys, GROUP))
    entries = [add(redis_sync, keys, ready_fields(f"j{i}", topic=keys.topic)) for i in range(4)]
    deliver(redis_sync, keys, GROUP, WORKER)
    redis_sync.xack(keys.ready, GROUP, entries[1])  # settled by someone else: skipped

    count = run(
        settle.dead_letter(
            keys,
            GROUP,
            [
                (entries[0], "failed", "e0"),
                (entries[1], "failed", "e1"),
                (entries[2], "malformed", "e2"),
                (entries[3], "deliveries", "e3"),
            ],
        )
    )

    assert count == 3
    assert dead_entries(redis_sync, keys) == [
        dead_fields("j0", topic=keys.topic, reason="failed", error="e0", entry=entries[0]),
        dead_fields("j2", topic=keys.topic, reason="malformed", error="e2", entry=entries[2]),
        dead_fields("j3", topic=keys.topic, reason="deliveries", error="e3", entry=entries[3]),
    ]
    assert pending(redis_sync, keys, GROUP) == {}


@pytest.mark.parametrize("kind", ["arbitrary fields", "deleted after delivery"])
def test_dead_letter_copies_a_foreign_entry_whatever_its_fields(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, kind: str
) -> None:
    run(consume.create_group(keys, GROUP))
    foreign = {b"\xffkey": b"\x00\xc1value", b"payload": b"not msgpack \xc1"}
    entry = add(redis_sync, keys, foreign)
    deliver(redis_sync, keys, GROUP, WORKER)
    if kind == "deleted after delivery":
        redis_sync.xdel(keys.ready, entry)  # still pending, but no fields left to copy
        foreign = {}

    assert run(settle.dead_letter(keys, GROUP, [(entry, "malformed", "no id")])) == 1

    assert dead_entries(redis_sync, keys) == [
        {**foreign, **dead_annotations("malformed", "no id", entry)}
    ]
    assert pending(redis_sync, keys, GROUP) == {}


@pytest.mark.parametrize("name", ["ready", "dead"])
def test_dead_letter_key_of_wrong_type_is_a_script_error_and_writes_nothing(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, name: str
) -> None:
    entry = "1-0"
    if name != "ready":
        run(consume.create_group(keys, GROUP))
        entry = add(redis_sync, keys, ready_fields(topic=keys.topic))
        deliver(redis_sync, keys, GROUP, WORKER)
    bad = getattr(keys, name)
    plant_wrong_type(redis_sync, bad)
    before = snapshot(redis_sync, keys)

    with pytest.raises(ScriptError, match=re.escape(f"dead_letter.lua: key '{bad}' holds")):
        run(settle.dead_letter(keys, GROUP, [(entry, "failed", "boom")]))

    assert snapshot(redis_sync, keys) == before


# --- pull receipts: settling only the delivery a receipt names ------------------------------


@pytest.fixture
def taken_over(redis_sync: redis.Redis, delivered: str, keys: ShardKeys) -> str:
    """j1's entry, delivered to WORKER once, then taken over by OTHER_WORKER (delivery 2)."""
    set_pending(redis_sync, keys, delivered, OTHER_WORKER, deliveries=2)
    assert pending(redis_sync, keys, GROUP)[delivered]["consumer"] == OTHER_WORKER.encode()
    return delivered


def settle_by_receipt(keys: ShardKeys, entry: str, how: str, delivery: settle.Delivery) -> Any:
    """The call a pull receipt for `delivery` makes, as `how` (ack, retry, dead_letter)."""
    if how == "ack":
        return settle.ack_delivered(keys, GROUP, [(entry, "j1", 1000, 5, None, 1)], [delivery])
    if how == "retry":
        envelope = next_attempt().pack()
        return settle.retry(keys, GROUP, entry, "j1", MINUTE_MS, envelope, "", 0, delivery)
    return settle.dead_letter_delivered(keys, GROUP, (entry, "failed", "boom"), delivery)


def late_settlement(keys: ShardKeys, entry: str, how: str) -> Any:
    """What a stale worker (WORKER, its delivery 1) sends for j1's entry, as `how`."""
    late = msgpack.packb({"by": "the stale worker"})
    if how == "ack":
        return settle.ack_done(keys, GROUP, [(entry, "j1", 2000, 9, late, 1)])
    if how == "retry":
        return settle.retry(keys, GROUP, entry, "j1", MINUTE_MS, next_attempt().pack(), "late")
    if how == "dead_letter":
        return settle.dead_letter(keys, GROUP, [(entry, "failed", "late")])
    if how == "pull ack":
        return settle.ack_delivered(keys, GROUP, [(entry, "j1", 2000, 9, late, 1)], [(WORKER, 1)])
    return settle_by_receipt(keys, entry, how.removeprefix("pull "), (WORKER, 1))


@pytest.mark.parametrize(
    "how", ["ack", "retry", "dead_letter", "pull ack", "pull retry", "pull dead_letter"]
)
def test_a_late_settlement_of_any_kind_leaves_the_first_success_and_its_result(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, taken_over: str, how: str
) -> None:
    first = msgpack.packb({"by": "the worker that took it over", "raw": b"\x00\xff"})
    assert run(settle.ack_done(keys, GROUP, [(taken_over, "j1", 1000, 5, first, 1)])) == 1
    redis_sync.hdel(keys.history, f"{US}results")  # an ack counts results it sends, kept or not
    before = snapshot(redis_sync, keys)

    run(late_settlement(keys, taken_over, how))

    redis_sync.hdel(keys.history, f"{US}results")
    assert snapshot(redis_sync, keys) == before
    assert record(redis_sync, keys, "j1") == ["S", taken_over, 1000, 5, "", "", "", first]


STALE = {"ack": [-1], "retry": settle.Retried(False, stale=True), "dead_letter": -1}
SETTLED = {"ack": [1], "retry": True, "dead_letter": 1}


@pytest.mark.parametrize("how", ["ack", "retry", "dead_letter"])
@pytest.mark.parametrize(
    "stale", [(WORKER, 1), (OTHER_WORKER, 1), (WORKER, 2)], ids=["first", "count", "consumer"]
)
def test_a_receipt_of_an_earlier_delivery_settles_nothing(
    redis_sync: redis.Redis,
    run: Runner,
    keys: ShardKeys,
    taken_over: str,
    how: str,
    stale: settle.Delivery,
) -> None:
    before = snapshot(redis_sync, keys)
    assert run(settle_by_receipt(keys, taken_over, how, stale)) == STALE[how]
    assert snapshot(redis_sync, keys) == before

    got = run(settle_by_receipt(keys, taken_over, how, (OTHER_WORKER, 2)))
    assert (got.done if how == "retry" else got) == SETTLED[how]
    assert pending(redis_sync, keys, GROUP) == {}
    after = snapshot(redis_sync, keys)
    assert run(settle_by_receipt(keys, taken_over, how, (OTHER_WORKER, 2))) in (
        [0],
        settle.Retried(False),
        0,
    )
    assert snapshot(redis_sync, keys) == after


def test_an_ack_of_receipts_answers_each_and_records_only_the_acked(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    run(consume.create_group(keys, GROUP))
    entries = [add(redis_sync, keys, ready_fields(f"j{i}", topic=keys.topic)) for i in range(3)]
    deliver(redis_sync, keys, GROUP, WORKER)
    set_pending(redis_sync, keys, entries[0], OTHER_WORKER, deliveries=2)
    redis_sync.xack(keys.ready, GROUP, entries[2])
    runs = [(e, f"j{i}", 1000, 5, None, 1) for i, e in enumerate(entries)]
    fences = [(WORKER, 1)] * 3

    assert run(settle.ack_delivered(keys, GROUP, runs, fences)) == [-1, 1, 0]
    assert list(pending(redis_sync, keys, GROUP)) == [entries[0]]
    assert record(redis_sync, keys, "j0") is None and record(redis_sync, keys, "j2") is None
    assert record(redis_sync, keys, "j1") == ["S", entries[1], 1000, 5, "", "", ""]
    # A group that does not exist holds nothing pending (as XACK has it), not an error.
    assert run(settle.ack_delivered(keys, "nobody", runs[:1], fences[:1])) == [0]


# --- claim ----------------------------------------------------------------------------------


def delivered_entries(r: redis.Redis, run: Runner, keys: ShardKeys, n: int) -> list[str]:
    """`n` entries (jobs j0..), delivered to WORKER in GROUP."""
    run(consume.create_group(keys, GROUP))
    entries = [add(r, keys, ready_fields(f"j{i}", topic=keys.topic)) for i in range(n)]
    assert deliver(r, keys, GROUP, WORKER) == entries
    return entries


def claim(
    run: Runner,
    keys: ShardKeys,
    min_idle_ms: int,
    max_deliveries: int = 5,
    cursor: str = streams.ZERO_ID,
    count: int = 100,
) -> consume.Claimed:
    return run(consume.claim(keys, GROUP, OTHER_WORKER, min_idle_ms, cursor, count, max_deliveries))


def test_claim_takes_only_entries_idle_at_least_min_idle(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    stalled, fresh = delivered_entries(redis_sync, run, keys, 2)
    set_pending(redis_sync, keys, stalled, WORKER, idle_ms=HOUR_MS)

    claimed = claim(run, keys, min_idle_ms=MINUTE_MS)

    assert [eid for eid, _ in claimed.entries] == [stalled]
    assert run(consume.pending_of(keys, GROUP, OTHER_WORKER, 10)) == [stalled]
    assert run(consume.pending_of(keys, GROUP, WORKER, 10)) == [fresh]


def test_claim_returns_the_claimed_entries_fields(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    entries = delivered_entries(redis_sync, run, keys, 2)

    claimed = claim(run, keys, min_idle_ms=0)

    assert claimed.entries == [
        (entries[0], ready_fields("j0", topic=keys.topic)),
        (entries[1], ready_fields("j1", topic=keys.topic)),
    ]
    assert claimed.cursor == streams.ZERO_ID and claimed.dead_lettered == 0
    assert claimed.deliveries == [2, 2]  # read once, now claimed


def test_claim_acks_an_entry_fired_before_a_cancel_of_its_job_and_hands_out_the_rest(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    r = redis_sync
    kept, fenced = delivered_entries(r, run, keys, 2)  # j0, j1: running when j1 is cancelled
    cancel_pending_j1(r, run, keys)
    before = server_ms(r)

    claimed = claim(run, keys, min_idle_ms=0)  # j1's worker died: its entry is taken over

    assert [eid for eid, _ in claimed.entries] == [kept]
    assert list(pending(r, keys, GROUP)) == [kept]
    rec = record(r, keys, "j1")
    assert rec is not None and (rec[0], rec[1]) == ("C", fenced) and rec[2] >= before
    assert claimed.dead_lettered == 0 and r.exists(keys.dead) == 0


def test_claim_returns_each_entrys_delivery_count_this_one_included(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    once, thrice, poison = delivered_entries(redis_sync, run, keys, 3)
    set_pending(redis_sync, keys, thrice, WORKER, deliveries=3)
    set_pending(redis_sync, keys, poison, WORKER, deliveries=5)

    claimed = claim(run, keys, min_idle_ms=0, max_deliveries=5)

    assert [eid for eid, _ in claimed.entries] == [once, thrice]
    assert claimed.deliveries == [2, 4]
    assert claimed.dead_lettered == 1
    rows = pending(redis_sync, keys, GROUP)
    assert [rows[e]["times_delivered"] for e in (once, thrice)] == claimed.deliveries


def test_claim_dead_letters_an_entry_delivered_more_than_max_deliveries_times(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    poison, healthy = delivered_entries(redis_sync, run, keys, 2)
    set_pending(redis_sync, keys, poison, WORKER, deliveries=7)
    set_pending(redis_sync, keys, healthy, WORKER, deliveries=1)

    claimed = claim(run, keys, min_idle_ms=0, max_deliveries=3)

    assert claimed.dead_lettered == 1
    assert [eid for eid, _ in claimed.entries] == [healthy]
    assert set(pending(redis_sync, keys, GROUP)) == {healthy}
    [dead] = dead_entries(redis_sync, keys)
    assert (
        dead.items() >= {**ready_fields("j0", topic=keys.topic), b"reason": b"deliveries"}.items()
    )
    assert (dead[Field.GROUP], dead[Field.ENTRY]) == (GROUP.encode(), poison.encode())
    assert b"max_deliveries 3" in dead[Field.ERROR]


@pytest.mark.parametrize(
    ("deliveries", "handed_out"), [(2, True), (3, False)], ids=["max-1", "max"]
)
def test_claim_never_hands_an_entry_out_more_than_max_deliveries_times(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, deliveries: int, handed_out: bool
) -> None:
    [entry] = delivered_entries(redis_sync, run, keys, 1)
    set_pending(redis_sync, keys, entry, WORKER, deliveries=deliveries)

    claimed = claim(run, keys, min_idle_ms=0, max_deliveries=3)

    assert bool(claimed.entries) == handed_out
    assert claimed.dead_lettered == (0 if handed_out else 1)
    if handed_out:
        assert pending(redis_sync, keys, GROUP)[entry]["times_delivered"] == 3
        assert claimed.deliveries == [3]


def test_claim_cursor_iterates_over_every_idle_entry(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    entries = delivered_entries(redis_sync, run, keys, 5)
    seen: list[str] = []
    cursor, calls = streams.ZERO_ID, 0
    while True:
        page = claim(run, keys, min_idle_ms=0, cursor=cursor, count=2)
        calls += 1
        assert len(page.entries) <= 2
        seen += [eid for eid, _ in page.entries]
        cursor = page.cursor
        if cursor == streams.ZERO_ID or calls > 10:
            break

    assert seen == entries
    assert calls >= 3
    assert run(consume.pending_of(keys, GROUP, OTHER_WORKER, 10)) == entries


@pytest.mark.parametrize("name", ["ready", "dead"])
def test_claim_key_of_wrong_type_is_a_script_error_and_writes_nothing(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, name: str
) -> None:
    if name != "ready":
        [entry] = delivered_entries(redis_sync, run, keys, 1)
        set_pending(redis_sync, keys, entry, WORKER, deliveries=9)  # would be dead-lettered
    bad = getattr(keys, name)
    plant_wrong_type(redis_sync, bad)
    before = snapshot(redis_sync, keys)

    with pytest.raises(ScriptError, match=re.escape(f"claim.lua: key '{bad}' holds")):
        claim(run, keys, min_idle_ms=0, max_deliveries=3)

    assert snapshot(redis_sync, keys) == before


# --- touch ----------------------------------------------------------------------------------


def test_touch_idle_0_resets_the_idle_time_of_this_consumers_entries(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    mine_a, mine_b, theirs = delivered_entries(redis_sync, run, keys, 3)
    for entry in (mine_a, mine_b):
        set_pending(redis_sync, keys, entry, WORKER, idle_ms=HOUR_MS)
    set_pending(redis_sync, keys, theirs, OTHER_WORKER, idle_ms=HOUR_MS)

    assert run(consume.touch(keys, GROUP, WORKER, 0, [mine_a, mine_b])) == []

    rows = pending(redis_sync, keys, GROUP)
    assert rows[mine_a]["time_since_delivered"] < MINUTE_MS
    assert rows[mine_b]["time_since_delivered"] < MINUTE_MS
    assert rows[theirs]["time_since_delivered"] >= HOUR_MS


def test_touch_reports_entries_held_elsewhere_as_lost_and_leaves_them(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    mine, taken, acked = delivered_entries(redis_sync, run, keys, 3)
    set_pending(redis_sync, keys, taken, OTHER_WORKER, idle_ms=HOUR_MS)
    redis_sync.xack(keys.ready, GROUP, acked)

    lost = run(consume.touch(keys, GROUP, WORKER, 0, [mine, taken, acked, "1-0"]))

    assert lost == [taken, acked, "1-0"]
    assert run(consume.pending_of(keys, GROUP, WORKER, 10)) == [mine]
    row = pending(redis_sync, keys, GROUP)[taken]
    assert row["consumer"] == OTHER_WORKER.encode()
    assert row["time_since_delivered"] >= HOUR_MS  # not refreshed either
    assert acked not in pending(redis_sync, keys, GROUP)


def test_touch_with_the_visibility_timeout_hands_entries_to_the_next_claim(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    handed_on, kept = delivered_entries(redis_sync, run, keys, 2)
    assert claim(run, keys, min_idle_ms=MINUTE_MS).entries == []  # both freshly delivered

    assert run(consume.touch(keys, GROUP, WORKER, MINUTE_MS, [handed_on])) == []

    assert pending(redis_sync, keys, GROUP)[handed_on]["time_since_delivered"] >= MINUTE_MS
    assert [eid for eid, _ in claim(run, keys, min_idle_ms=MINUTE_MS).entries] == [handed_on]
    assert run(consume.pending_of(keys, GROUP, WORKER, 10)) == [kept]


@pytest.mark.parametrize("idle_ms", [0, MINUTE_MS])
def test_touch_does_not_change_delivery_counts(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, idle_ms: int
) -> None:
    [entry] = delivered_entries(redis_sync, run, keys, 1)
    set_pending(redis_sync, keys, entry, WORKER, deliveries=2)

    run(consume.touch(keys, GROUP, WORKER, idle_ms, [entry]))
    run(consume.touch(keys, GROUP, WORKER, idle_ms, [entry]))

    assert pending(redis_sync, keys, GROUP)[entry]["times_delivered"] == 2


# --- trim -----------------------------------------------------------------------------------


def trim(
    run: Runner,
    keys: ShardKeys,
    retention_ms: int = 0,
    limit: int = 1000,
    consumer_idle_ms: int = TEN_YEARS_MS,
) -> history.Trimmed:
    return run(history.trim(keys, retention_ms, limit, consumer_idle_ms))


def read_and_ack(r: redis.Redis, keys: ShardKeys, group: str, read: int, ack: list[str]) -> None:
    deliver(r, keys, group, WORKER, count=read)
    if ack:
        r.xack(keys.ready, group, *ack)


def test_trim_never_trims_a_stream_no_group_reads(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    entries = old_entries(redis_sync, keys, 3)

    assert trim(run, keys) == history.Trimmed(0, False, 0)
    assert ids_of(redis_sync, keys.ready) == entries


def test_trim_of_a_missing_stream_does_nothing(run: Runner, keys: ShardKeys) -> None:
    assert trim(run, keys) == history.Trimmed(0, False, 0)


def test_trim_removes_acked_entries_and_keeps_pending_ones(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    e = old_entries(redis_sync, keys, 6)
    run(consume.create_group(keys, GROUP))
    read_and_ack(redis_sync, keys, GROUP, 6, [e[0], e[1], e[2], e[4]])  # e3, e5 pending

    assert trim(run, keys) == history.Trimmed(3, False, 0)
    assert ids_of(redis_sync, keys.ready) == e[3:]


def test_trim_keeps_entries_not_yet_delivered_to_a_group(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    e = old_entries(redis_sync, keys, 6)
    run(consume.create_group(keys, GROUP))
    read_and_ack(redis_sync, keys, GROUP, 3, e[:3])  # e3..e5 never delivered

    trim(run, keys)

    remaining = ids_of(redis_sync, keys.ready)
    assert remaining[-3:] == e[3:]
    # e2, the last delivered, is left out here: see the "including the last delivered" test.
    assert e[0] not in remaining and e[1] not in remaining


@pytest.mark.parametrize("slower", ["has them pending", "was not delivered them"])
def test_trim_with_two_groups_keeps_the_slower_groups_unacked_entries(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, slower: str
) -> None:
    e = old_entries(redis_sync, keys, 6)
    run(consume.create_group(keys, GROUP))
    run(consume.create_group(keys, OTHER_GROUP))
    read_and_ack(redis_sync, keys, GROUP, 6, e)  # the fast group acked everything
    read = 6 if slower == "has them pending" else 2
    read_and_ack(redis_sync, keys, OTHER_GROUP, read, e[:2])

    trim(run, keys)

    remaining = ids_of(redis_sync, keys.ready)
    assert remaining[-4:] == e[2:]
    assert e[0] not in remaining  # e1 (the slower group's last delivered) is left out


def test_trim_removes_every_entry_all_groups_acked_including_the_last_delivered(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    """Each of these entries was delivered to and acked by the only group, long past
    retention: none is needed any more (trim.lua's own header: "drop entries every group has
    acked once past retention")."""
    e = old_entries(redis_sync, keys, 3)
    run(consume.create_group(keys, GROUP))
    read_and_ack(redis_sync, keys, GROUP, 3, e)

    trimmed = trim(run, keys)

    assert ids_of(redis_sync, keys.ready) == []
    assert trimmed == history.Trimmed(3, False, 0)


def test_trim_keeps_entries_younger_than_retention(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    older = old_entries(redis_sync, keys, 3, age_ms=3 * HOUR_MS)
    younger = old_entries(redis_sync, keys, 3, age_ms=HOUR_MS)
    last = add(redis_sync, keys, ready_fields(topic=keys.topic))
    run(consume.create_group(keys, GROUP))
    read_and_ack(redis_sync, keys, GROUP, 7, [*older, *younger])  # only `last` pending

    assert trim(run, keys, retention_ms=TEN_YEARS_MS).trimmed == 0
    assert ids_of(redis_sync, keys.ready) == [*older, *younger, last]

    assert trim(run, keys, retention_ms=2 * HOUR_MS) == history.Trimmed(3, False, 0)
    assert ids_of(redis_sync, keys.ready) == [*younger, last]


def test_trim_limit_bounds_one_call_and_reports_more(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    e = old_entries(redis_sync, keys, 11)
    run(consume.create_group(keys, GROUP))
    read_and_ack(redis_sync, keys, GROUP, 11, e[:10])  # e10 pending: e0..e9 trimmable

    calls = [trim(run, keys, limit=4) for _ in range(4)]

    assert [(c.trimmed, c.more) for c in calls] == [(4, True), (4, True), (2, False), (0, False)]
    assert ids_of(redis_sync, keys.ready) == [e[10]]


def records(r: redis.Redis, key: str) -> dict[bytes, bytes]:
    """A history generation's job records, without its \\x1f markers."""
    return {f: v for f, v in r.hgetall(key).items() if not f.startswith(b"\x1f")}


def test_trim_drops_a_history_generation_only_once_no_entry_it_can_name_is_left(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    r = redis_sync
    e = old_entries(r, keys, 3)
    r.hset(keys.history, mapping={f"j{i}": e[i] for i in range(3)})
    run(consume.create_group(keys, GROUP))
    read_and_ack(r, keys, GROUP, 3, e[:2])  # e2 pending

    # The first trim takes e0, e1; the records become the old generation, upto e2.
    assert trim(run, keys).trimmed == 2
    assert records(r, keys.history) == {}
    assert records(r, keys.history_old) == {f"j{i}".encode(): e[i].encode() for i in range(3)}
    assert r.hget(keys.history_old, "\x1fupto") == e[2].encode()
    later = add(r, keys, ready_fields("j3", topic=keys.topic))
    r.hset(keys.history, "j3", later)  # written after the turn: the current generation

    # e2 is still there (pending): its generation stays, however often trim runs.
    assert trim(run, keys).trimmed == 0
    assert r.hget(keys.history_old, "j2") == e[2].encode()

    # e2 acked and trimmed: nothing the old generation names is left, and it goes whole; the
    # current one, naming e3 (still there), becomes the old one (retention 0 here).
    read_and_ack(r, keys, GROUP, 1, [e[2]])
    assert trim(run, keys).trimmed == 1
    assert ids_of(r, keys.ready) == [later]
    assert records(r, keys.history_old) == {b"j3": later.encode()}
    assert r.hget(keys.history_old, "\x1fupto") == later.encode()
    assert records(r, keys.history) == {}


def test_trim_keeps_the_current_history_generation_for_the_retention(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    r = redis_sync
    e = old_entries(r, keys, 2)
    r.hset(keys.history, mapping={"j0": e[0], "j1": e[1]})
    run(consume.create_group(keys, GROUP))
    read_and_ack(r, keys, GROUP, 2, e)

    # Entries an hour old go at a retention of a minute; the records, current for less than
    # a minute, stay current (no byte budget asks otherwise): a record outlives its entry
    # by a retention at most, never the other way round.
    assert trim(run, keys, retention_ms=60_000).trimmed == 2
    assert r.exists(keys.history_old) == 0
    assert records(r, keys.history) == {b"j0": e[0].encode(), b"j1": e[1].encode()}


def test_trim_over_the_byte_budget_trims_at_least_what_retention_does(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    r = redis_sync
    e = old_entries(r, keys, 4)
    r.hset(keys.history_old, mapping={"j0": e[0], "\x1fupto": e[0]})  # names e0 only
    r.hset(keys.history, mapping={f"j{i}": e[i] for i in range(1, 4)})
    run(consume.create_group(keys, GROUP))
    read_and_ack(r, keys, GROUP, 4, e)

    # Over the budget the trim goes up to the old generation's upto, and retention (0 here)
    # takes every acked entry older than now: both apply, not just the first.
    assert run(history.trim(keys, 0, 1000, TEN_YEARS_MS, 1)).trimmed == 4
    assert ids_of(r, keys.ready) == []


def test_trim_deletes_idle_consumers_that_hold_nothing(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    e = old_entries(redis_sync, keys, 2)
    run(consume.create_group(keys, GROUP))
    deliver(redis_sync, keys, GROUP, WORKER, count=1)  # WORKER holds e0
    redis_sync.xgroup_createconsumer(keys.ready, GROUP, OTHER_WORKER)  # holds nothing

    # Every consumer has been idle longer than -1 ms: only holding entries keeps one.
    assert trim(run, keys, consumer_idle_ms=-1).consumers_deleted == 1

    consumers = [c["name"] for c in redis_sync.xinfo_consumers(keys.ready, GROUP)]
    assert consumers == [WORKER.encode()]
    assert set(pending(redis_sync, keys, GROUP)) == {e[0]}


def test_trim_keeps_consumers_idle_less_than_the_threshold(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    old_entries(redis_sync, keys, 1)
    run(consume.create_group(keys, GROUP))
    redis_sync.xgroup_createconsumer(keys.ready, GROUP, OTHER_WORKER)

    assert trim(run, keys, consumer_idle_ms=HOUR_MS).consumers_deleted == 0
    assert [c["name"] for c in redis_sync.xinfo_consumers(keys.ready, GROUP)] == [
        OTHER_WORKER.encode()
    ]


def test_trim_key_of_wrong_type_is_a_script_error(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    redis_sync.set(keys.ready, "wrong type")

    with pytest.raises(ScriptError, match=re.escape(f"trim.lua: key '{keys.ready}' holds")):
        trim(run, keys)

    assert redis_sync.get(keys.ready) == b"wrong type"


_example_shards = itertools.count()
# Weighted towards reads and acks, so unacked entries older than acked ones are common.
trim_steps = st.lists(
    st.tuples(
        st.sampled_from(["add", "add", "read", "read", "ack", "ack", "ack", "trim"]),
        st.integers(0, 1),
        st.integers(1, 4),
    ),
    max_size=40,
)


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=trim_steps, limit=st.integers(1, 5), seed=st.integers(0, 2**32 - 1))
def test_trim_never_deletes_an_entry_some_group_has_not_acked(
    redis_sync: redis.Redis, topic: str, steps: list[tuple[str, int, int]], limit: int, seed: int
) -> None:
    """docs/architecture.md, invariant 5, under random reads, acks and trims by two groups:
    after every trim (retention 0), each entry pending in or not yet delivered to either group
    still exists."""
    keys = ShardKeys(topic, next(_example_shards))  # fresh keys for each example
    run = Runner(redis_sync)
    rnd = random.Random(seed)
    groups = (GROUP, OTHER_GROUP)
    for group in groups:
        run(consume.create_group(keys, group))
    next_ms = server_ms(redis_sync) - HOUR_MS
    added: list[str] = []
    acked: dict[str, set[str]] = {g: set() for g in groups}
    delivered: dict[str, list[str]] = {g: [] for g in groups}

    def check_after_trim() -> None:
        trimmed = trim(run, keys, limit=limit)
        assert trimmed.trimmed <= limit
        remaining = set(ids_of(redis_sync, keys.ready))
        unacked = {e for e in added if any(e not in acked[g] for g in groups)}
        assert unacked <= remaining, f"trimmed unacked entries {sorted(unacked - remaining)}"

    for kind, g, n in [*steps, ("trim", 0, 0)]:
        group = groups[g]
        if kind == "add":
            for _ in range(n):
                added.append(add(redis_sync, keys, ready_fields(topic=keys.topic), f"{next_ms}-0"))
                next_ms += 1
        elif kind == "read":
            delivered[group] += deliver(redis_sync, keys, group, f"c{n % 2}", count=n)
        elif kind == "ack":
            unsettled = [e for e in delivered[group] if e not in acked[group]]
            chosen = rnd.sample(unsettled, min(n, len(unsettled)))
            if chosen:
                redis_sync.xack(keys.ready, group, *chosen)
                acked[group].update(chosen)
        else:
            check_after_trim()


# --- replay ---------------------------------------------------------------------------------


def dead_letter_of(r: redis.Redis, run: Runner, keys: ShardKeys, fields: dict[bytes, bytes]) -> str:
    """Deliver an entry with `fields` to GROUP and dead-letter it; the dead letter's id."""
    run(consume.create_group(keys, GROUP))
    entry = add(r, keys, fields)
    deliver(r, keys, GROUP, WORKER)
    assert run(settle.dead_letter(keys, GROUP, [(entry, "failed", "boom")])) == 1
    return ids_of(r, keys.dead)[-1]


def test_replay_puts_a_dead_letter_back_as_a_first_attempt_for_its_group(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    died = ready_fields("j1", topic=keys.topic, attempt=4, max_attempts=4, payload=RAW_PAYLOAD)
    dead_id = dead_letter_of(redis_sync, run, keys, died)
    before = server_ms(redis_sync)

    assert run(dead_letters.replay(keys, [dead_id])) == (1, 0, [])
    after = server_ms(redis_sync)

    entry_id, fields = redis_sync.xrange(keys.ready)[-1]
    due = int(fields[Field.DUE])
    assert before <= due <= after
    assert int(entry_id.split(b"-")[0]) >= due
    assert fields == {
        **ready_fields(
            "j1", topic=keys.topic, attempt=1, max_attempts=4, payload=RAW_PAYLOAD, due_ms=due
        ),
        Field.GROUP: GROUP.encode(),
    }
    assert redis_sync.xlen(keys.dead) == 0


@pytest.mark.parametrize("missing", [b"id", b"payload"])
def test_replay_leaves_a_dead_letter_without_id_or_payload(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, missing: bytes
) -> None:
    fields = ready_fields(topic=keys.topic)
    del fields[missing]
    dead_id = dead_letter_of(redis_sync, run, keys, fields)
    ready_before = redis_sync.xlen(keys.ready)

    assert run(dead_letters.replay(keys, [dead_id])) == (0, 0, [dead_id])

    assert ids_of(redis_sync, keys.dead) == [dead_id]
    assert redis_sync.xlen(keys.ready) == ready_before


def test_replay_ignores_unknown_ids(redis_sync: redis.Redis, run: Runner, keys: ShardKeys) -> None:
    dead_id = dead_letter_of(redis_sync, run, keys, ready_fields(topic=keys.topic))
    before = snapshot(redis_sync, keys)

    assert run(dead_letters.replay(keys, ["1-0", "99999999999999-0"])) == (0, 0, [])

    assert snapshot(redis_sync, keys) == before
    assert ids_of(redis_sync, keys.dead) == [dead_id]


@pytest.mark.parametrize("name", ["dead", "ready"])
def test_replay_key_of_wrong_type_is_a_script_error_and_writes_nothing(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, name: str
) -> None:
    dead_id = "1-0"
    if name != "dead":
        dead_id = redis_sync.xadd(keys.dead, ready_fields(topic=keys.topic)).decode()
    bad = getattr(keys, name)
    plant_wrong_type(redis_sync, bad)
    before = snapshot(redis_sync, keys)

    with pytest.raises(ScriptError, match=re.escape(f"replay.lua: key '{bad}' holds")):
        run(dead_letters.replay(keys, [dead_id]))

    assert snapshot(redis_sync, keys) == before


# --- purge_dead -----------------------------------------------------------------------------


def test_purge_dead_deletes_the_given_dead_letters(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    dead = [redis_sync.xadd(keys.dead, {"n": str(i)}).decode() for i in range(3)]

    assert run(dead_letters.purge_dead(keys, [dead[0], dead[2], "1-0"])) == 2

    assert ids_of(redis_sync, keys.dead) == [dead[1]]


@pytest.mark.parametrize("n", [0, 3])
def test_purge_dead_of_all_deletes_the_stream_and_counts(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys, n: int
) -> None:
    for i in range(n):
        redis_sync.xadd(keys.dead, {"n": str(i)})
    other = ShardKeys(keys.topic, keys.shard + 1)
    redis_sync.xadd(other.dead, {"n": "kept"})

    assert run(dead_letters.purge_dead(keys, None)) == n

    assert redis_sync.exists(keys.dead) == 0
    assert redis_sync.xlen(other.dead) == 1


def test_purge_dead_of_all_with_a_dead_key_of_wrong_type_is_a_script_error_and_deletes_nothing(
    redis_sync: redis.Redis, run: Runner, keys: ShardKeys
) -> None:
    plant_wrong_type(redis_sync, keys.dead)
    before = snapshot(redis_sync, keys)

    with pytest.raises(ScriptError, match=re.escape(f"purge_dead.lua: key '{keys.dead}' holds")):
        run(dead_letters.purge_dead(keys, None))

    assert snapshot(redis_sync, keys) == before
