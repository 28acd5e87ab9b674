"""Recurring schedules on a real server, planned under a manual clock: across both DST changes
of a northern and a southern zone, through an outage under each misfire policy, a planner
fenced out by a newer one, a round redone after a crash, and pause / resume / unschedule.

The planner (`Materializer`) runs in the test with a `ManualClock` and leases it took for
real, so every round is one deterministic `plan_once()`. Times are in 2027, ahead of the
server's clock: runs written stay pending in the shards' sorted sets, where the test reads
them back by id.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import msgpack
import pytest
import redis
import redis.asyncio

from wheelq import Admin, AsyncAdmin, Client
from wheelq.core.callback import Callback
from wheelq.core.clock import ManualClock
from wheelq.core.flow import order_keys
from wheelq.core.job import pack_envelope
from wheelq.core.keys import ShardKeys, all_shards, shard_of
from wheelq.core.options import RUN, STORED, stored_unset, view
from wheelq.core.payload import encode_payload
from wheelq.core.recurring import GRACE_MS, Plan, Schedule
from wheelq.core.settings import SchedulerSettings
from wheelq.errors import InvalidDelayError, LeaseLostError
from wheelq.runtime.role import executor_of
from wheelq.scheduler import materializer
from wheelq.scheduler.led_shards import Leads, NodeContext
from wheelq.scheduler.materializer import Materializer
from wheelq.store import leases
from wheelq.store import schedules as sched

SHARDS = 4
HOUR_MS = 3_600_000


@dataclass
class Planner:
    """A planner leading every shard of one topic, on a manual clock."""

    materializer: Materializer
    clock: ManualClock
    leads: Leads


async def planner(r: redis.asyncio.Redis, topic: str, token: str, window_ms: int) -> Planner:
    """Take every shard's lease for `token` (stealing none: the test's own topic) and plan."""
    executor = executor_of(r)
    clock = ManualClock(0)
    leads = Leads(token=token)
    for keys in all_shards(topic, SHARDS):
        (attempt,) = await executor.run([leases.lease_acquire(keys, token, 600_000)])
        assert attempt.held, attempt
        leads.add(keys, 0, SHARDS)
    settings = SchedulerSettings(window_ms=window_ms, failure_pause_max_ms=10)
    ctx = NodeContext(executor, clock, leads, settings, lambda lead: None)
    return Planner(Materializer(ctx), clock, leads)


@pytest.fixture
def client(redis_url: str, topic: str) -> Iterator[Client]:
    with Client.from_url(redis_url) as c:
        Admin.of(c).create_topic(topic, SHARDS)
        yield c


@pytest.fixture
async def node(redis_async: redis.asyncio.Redis, topic: str) -> AsyncIterator[Planner]:
    yield await planner(redis_async, topic, "node-a", HOUR_MS)


def written(r: redis.Redis, topic: str, name: str) -> list[int]:
    """Occurrence ms of every run of `name` pending in the topic, ascending (each listed as
    often as it exists)."""
    runs = []
    for keys in all_shards(topic, SHARDS):
        runs += [
            int(m.decode().rpartition("@")[2])
            for m in r.zrange(keys.delayed, 0, -1)
            if m.decode().startswith(f"{name}@")
        ]
    return sorted(runs)


def ms(zone: str, *wall: int) -> int:
    return int(datetime(*wall, tzinfo=ZoneInfo(zone)).timestamp() * 1000)  # type: ignore[misc]


async def sweep(p: Planner, start_ms: int, end_ms: int, step_ms: int) -> None:
    for now in range(start_ms, end_ms + 1, step_ms):
        p.clock.set(now)
        await p.materializer.plan_once()


@pytest.mark.parametrize(
    ("zone", "day"),
    [
        ("Europe/Berlin", (2027, 3, 28)),  # spring forward: 02:00 -> 03:00
        ("Europe/Berlin", (2027, 10, 31)),  # fall back: 03:00 -> 02:00
        ("Australia/Sydney", (2027, 4, 4)),  # fall back: 03:00 -> 02:00
        ("Australia/Sydney", (2027, 10, 3)),  # spring forward: 02:00 -> 03:00
    ],
)
async def test_a_daily_0230_run_happens_once_a_day_across_each_dst_change(
    client: Client,
    admin: Admin,
    node: Planner,
    redis_sync: redis.Redis,
    topic: str,
    zone: str,
    day: tuple,
) -> None:
    y, m, d = day
    first = datetime(y, m, d, tzinfo=ZoneInfo(zone)) - timedelta(days=2)
    start = int(first.timestamp() * 1000)
    admin.schedule(
        "nightly", topic, "x", cron="30 2 * * *", tz=zone, start=start / 1000, misfire="skip"
    )
    await sweep(node, start, start + 5 * 24 * HOUR_MS, HOUR_MS // 2)
    local = [
        datetime.fromtimestamp(t / 1000, ZoneInfo(zone))
        for t in written(redis_sync, topic, "nightly")
    ]
    assert [x.date() for x in local] == [(first + timedelta(days=i)).date() for i in range(5)]
    expected = []
    for i in range(5):
        date = (first + timedelta(days=i)).date()
        # fold=0: on a fall-back day, the first (summer-time) 02:30
        wall = datetime(date.year, date.month, date.day, 2, 30, tzinfo=ZoneInfo(zone))
        if datetime.fromtimestamp(wall.timestamp(), ZoneInfo(zone)).hour != 2:
            # no 02:30 that day (spring forward): the next valid time, 03:00
            wall = datetime(date.year, date.month, date.day, 3, 0, tzinfo=ZoneInfo(zone))
        expected.append(int(wall.timestamp() * 1000))
    assert written(redis_sync, topic, "nightly") == expected


@pytest.mark.parametrize(
    ("misfire", "late"),
    [("once", [3]), ("all", [1, 2, 3]), ("skip", [])],
)
async def test_an_outage_of_three_runs_is_made_good_by_the_misfire_policy(
    client: Client,
    admin: Admin,
    node: Planner,
    redis_sync: redis.Redis,
    topic: str,
    misfire: str,
    late: list[int],
) -> None:
    t0 = ms("UTC", 2027, 1, 1, 12, 0)
    admin.schedule("tick", topic, 1, every_ms=60_000, start=t0 / 1000, misfire=misfire)
    node.clock.set(t0)
    await node.materializer.plan_once()  # runs 0..60 (the hour ahead: the window) written
    # No planner runs until after run 63 + grace: runs 61..63 are missed
    node.clock.set(t0 + 63 * 60_000 + GRACE_MS + 1)
    await node.materializer.plan_once()
    runs = [(t - t0) // 60_000 for t in written(redis_sync, topic, "tick")]
    assert runs == [*range(61), *[60 + i for i in late], *range(64, 124)]


async def test_a_planner_fenced_out_by_a_newer_one_writes_nothing_more(
    admin: Admin, node: Planner, redis_async: redis.asyncio.Redis, redis_sync: redis.Redis,
    topic: str,
) -> None:  # fmt: skip
    t0 = ms("UTC", 2027, 1, 1, 12, 0)
    admin.schedule("tick", topic, 1, every_ms=60_000, start=t0 / 1000, misfire="all")
    node.clock.set(t0)
    await node.materializer.plan_once()
    first = written(redis_sync, topic, "tick")
    # Node A is deposed (its leases expire); node B leads and plans from where A recorded.
    for keys in all_shards(topic, SHARDS):
        redis_sync.delete(keys.lease)
    b = await planner(redis_async, topic, "node-b", HOUR_MS)
    b.clock.set(t0 + 30 * 60_000)
    await b.materializer.plan_once()
    both = written(redis_sync, topic, "tick")
    assert both == sorted(set(both)), "a run written twice"
    # A wakes with its old epoch and writes a run B has not reached yet: refused in every
    # shard, since B fenced them all when it began.
    epoch = next(iter(node.materializer._epochs.values()))
    run = (t0 + 200 * 60_000, pack_envelope(encode_payload(1, 100), 1, 5, t0))
    for keys in all_shards(topic, SHARDS):
        with pytest.raises(LeaseLostError):
            await executor_of(redis_async).run([sched.materialize(keys, epoch, "tick", [run])])
    assert written(redis_sync, topic, "tick") == both
    assert len(first) == 61 and both[-1] == t0 + 90 * 60_000


async def test_a_round_redone_after_a_crash_writes_no_run_twice(
    admin: Admin, node: Planner, redis_async: redis.asyncio.Redis, redis_sync: redis.Redis,
    topic: str, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    t0 = ms("UTC", 2027, 1, 1, 12, 0)
    admin.schedule("tick", topic, 1, every_ms=60_000, start=t0 / 1000)
    node.clock.set(t0)

    def crash(*args: object) -> None:
        raise ConnectionError("the node died after writing the runs, before recording them")

    monkeypatch.setattr(sched, "advance", crash)
    with pytest.raises(ConnectionError):
        await node.materializer.plan_once()
    monkeypatch.undo()
    assert len(written(redis_sync, topic, "tick")) == 61
    # They fire before a new leader redoes the round: gone from the pending set, as the
    # emit script leaves them (a pending check alone would write them again).
    for keys in all_shards(topic, SHARDS):
        for member in redis_sync.zrange(keys.delayed, 0, -1):
            redis_sync.zrem(keys.delayed, member)
            redis_sync.hdel(keys.jobs, member)
        redis_sync.delete(keys.lease)
    b = await planner(redis_async, topic, "node-b", HOUR_MS)
    b.clock.set(t0 + 60_000)
    assert await b.materializer.plan_once() == 1
    assert written(redis_sync, topic, "tick") == [t0 + 61 * 60_000]


async def test_pause_cancels_the_runs_written_ahead_and_resume_plans_from_now(
    client: Client, admin: Admin, node: Planner, redis_sync: redis.Redis, topic: str
) -> None:
    t0 = ms("UTC", 2027, 1, 1, 12, 0)
    admin.schedule("tick", topic, 1, every_ms=60_000, start=t0 / 1000, misfire="skip")
    node.clock.set(t0)
    await node.materializer.plan_once()
    assert len(written(redis_sync, topic, "tick")) == 61
    assert admin.pause_schedule("tick", topic)
    assert written(redis_sync, topic, "tick") == []  # all ahead of the server's clock
    node.clock.set(t0 + 5 * 60_000)
    assert await node.materializer.plan_once() == 0
    assert admin.get_schedule("tick", topic).paused  # type: ignore[union-attr]
    assert admin.resume_schedule("tick", topic)
    await node.materializer.plan_once()
    # Resumed: planned from now on (runs while paused are skipped, whatever the policy).
    assert written(redis_sync, topic, "tick") == [t0 + k * 60_000 for k in range(5, 66)]
    assert admin.unschedule("tick", topic)
    assert written(redis_sync, topic, "tick") == []
    assert admin.get_schedule("tick", topic) is None
    assert not admin.unschedule("tick", topic)


async def test_a_shard_whose_schedule_keys_are_broken_does_not_stop_the_others(
    client: Client, admin: Admin, node: Planner, redis_sync: redis.Redis, topic: str
) -> None:
    homes = {}
    for i in range(40):  # two schedules with different home shards
        homes.setdefault(shard_of(f"s{i}", SHARDS), f"s{i}")
    broken, fine = list(homes.items())[:2]
    t0 = ms("UTC", 2027, 1, 1, 12, 0)
    for _, name in (broken, fine):
        admin.schedule(name, topic, 1, every_ms=60_000, start=t0 / 1000)
    bad = ShardKeys(topic, broken[0]).sched_epoch
    redis_sync.delete(bad)
    redis_sync.rpush(bad, "not a counter")
    node.clock.set(t0)
    try:
        await node.materializer.plan_once()
    finally:
        redis_sync.delete(bad)  # the server is shared: schedules() of other tests reads it
    assert len(written(redis_sync, topic, fine[1])) == 61
    assert written(redis_sync, topic, broken[1]) == []
    status = node.materializer.status()
    assert status["failures"] == 1, status
    assert "sched_epoch" in str(status["last_error"]), status


async def test_an_update_applies_from_the_first_run_not_yet_written(
    client: Client, admin: Admin, node: Planner, redis_sync: redis.Redis, topic: str
) -> None:
    t0 = ms("UTC", 2027, 1, 1, 12, 0)
    admin.schedule("tick", topic, "old", every_ms=60_000, start=t0 / 1000)
    node.clock.set(t0)
    await node.materializer.plan_once()  # runs 0..60 min written, the old rule's
    updated = admin.schedule("tick", topic, "new", every_ms=30_000, start=t0 / 1000)
    assert updated.planned_ms == t0 + HOUR_MS and not updated.paused
    node.clock.set(t0 + 30 * 60_000)
    await node.materializer.plan_once()  # planned on from t0 + 60 min, by the new rule
    runs = written(redis_sync, topic, "tick")
    old = [t0 + k * 60_000 for k in range(61)]
    new = [t0 + HOUR_MS + k * 30_000 for k in range(1, 61)]
    assert runs == old + new
    assert client.get(topic, f"tick@{old[-1]}").payload == "old"
    assert client.get(topic, f"tick@{new[0]}").payload == "new"


def _same_home(names: int) -> list[str]:
    """`names` schedule names whose home is the same shard."""
    by_home: dict[int, list[str]] = {}
    for i in range(200):
        same = by_home.setdefault(shard_of(f"s{i}", SHARDS), [])
        same.append(f"s{i}")
        if len(same) == names:
            return same
    raise AssertionError("no shard is home to that many names")


async def _store_as_an_older_wheelq(
    r: redis.asyncio.Redis, topic: str, name: str, record: bytes
) -> None:
    """Write a schedule's record as it stands, unchecked (an older wheelq, or by hand)."""
    home = ShardKeys(topic, shard_of(name, SHARDS))
    await executor_of(r).run([sched.index(home), sched.put(home, name, record, False)])


async def test_a_schedule_stored_with_a_start_in_year_9999_stops_no_other_of_its_shard(
    client: Client,
    admin: Admin,
    node: Planner,
    redis_sync: redis.Redis,
    redis_async: redis.asyncio.Redis,
    topic: str,
) -> None:
    """Item 7: the planner raised OverflowError for the whole shard every round, so another
    every-second schedule of that shard fired none of its runs; listing answered 500."""
    far, unreadable, fine = _same_home(3)
    t0 = ms("UTC", 2027, 1, 1, 12, 0)
    admin.schedule(fine, topic, 1, every_ms=1000, start=t0 / 1000)
    year_9999 = ms("UTC", 9999, 12, 31, 23, 59) + 59_000
    older = admin.schedule(far, topic, 2, cron="* * * * *")  # then its start set as of old
    rule = dataclasses.replace(older.rule, start_ms=year_9999, anchor_ms=year_9999)
    await _store_as_an_older_wheelq(
        redis_async, topic, far, dataclasses.replace(older, rule=rule).pack()
    )
    await _store_as_an_older_wheelq(redis_async, topic, unreadable, b"\x93not a record")
    try:
        node.clock.set(t0)
        await node.materializer.plan_once()
        node.clock.set(t0 + 8000)
        await node.materializer.plan_once()
        assert written(redis_sync, topic, fine) == [t0 + k * 1000 for k in range(3601 + 8)]
        assert written(redis_sync, topic, far) == []
        assert node.materializer.unplannable == 1  # the unreadable one, logged once
        listed = {s.name: s for s in admin.schedules(topic)}
        assert sorted(listed) == sorted([far, unreadable, fine])
        assert listed[far].error is None and listed[far].next_run_ms(t0) is None
        assert listed[far].rule.start_ms == year_9999
        assert listed[unreadable].error is not None and listed[unreadable].next_run_ms(t0) is None
        assert listed[fine].error is None and listed[fine].next_run_ms(t0) == t0 + 1000
        assert admin.get_schedule(unreadable, topic) == listed[unreadable]
        assert admin.pause_schedule(unreadable, topic)
    finally:  # the server is shared: schedules() of other tests reads every topic's
        for name in (far, unreadable):
            admin.unschedule(name, topic)
    assert [s.name for s in admin.schedules(topic)] == [fine]


async def test_a_schedule_whose_plan_raises_is_skipped_while_its_shard_plans_on(
    client: Client,
    admin: Admin,
    node: Planner,
    redis_sync: redis.Redis,
    topic: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Item 7: a failure planning one schedule is that schedule's alone (logged and counted
    once per definition); the others of its home shard keep being planned."""
    bad, fine = _same_home(2)
    t0 = ms("UTC", 2027, 1, 1, 12, 0)
    for name in (bad, fine):
        admin.schedule(name, topic, 1, every_ms=60_000, start=t0 / 1000)
    real_plan = materializer.plan

    def plan(schedule: Schedule, now_ms: int, horizon_ms: int) -> Plan:
        if schedule.name == bad:
            raise ArithmeticError(f"cannot plan {schedule.name}")
        return real_plan(schedule, now_ms, horizon_ms)

    monkeypatch.setattr(materializer, "plan", plan)
    for step in range(3):
        node.clock.set(t0 + step * HOUR_MS)
        await node.materializer.plan_once()
    assert written(redis_sync, topic, fine) == [t0 + k * 60_000 for k in range(3 * 60 + 1)]
    assert written(redis_sync, topic, bad) == []
    status = node.materializer.status()
    assert node.materializer.unplannable == 1, status
    assert f"cannot plan {bad}" in str(status["last_error"]), status


@pytest.mark.parametrize(
    "when",
    [
        {"cron": "* * * * *", "start": datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)},
        {"every_ms": 1000, "start": 253_402_300_799},
        {"cron": "0 0 29 2 *", "tz": "Asia/Tokyo", "end": datetime(2204, 2, 29, tzinfo=UTC)},
        {"cron": "* * * * *", "end": 1e300},
    ],
)
async def test_a_schedule_time_out_of_range_is_refused_by_both_clients_storing_nothing(
    redis_url: str, topic: str, when: dict[str, Any]
) -> None:
    """Item 7: a start in year 9999 was stored, then broke the listing and its shard's
    planning; both clients refuse it, naming the field and the range, before any write."""
    field = "start" if "start" in when else "end"
    with Admin.from_url(redis_url) as sync:
        with pytest.raises(InvalidDelayError, match=rf"^{field} must be .*ten years on") as info:
            sync.schedule("far", topic, 1, **when)
        assert info.value.parameter == field
        async with AsyncAdmin.from_url(redis_url) as admin:
            with pytest.raises(InvalidDelayError, match=rf"^{field} must be") as info:
                await admin.schedule("far", topic, 1, **when)
            assert info.value.parameter == field
        assert topic not in sync.topics()
        assert sync.schedules(topic) == []


# --- what each run carries: the options of core.options.RUN, and max_attempts

HOOK = "https://hooks.example/run"
GIVEN = {"callback": HOOK, "text": "tenant-1", "flag": True, "int": 3, "priority": 0}
"""A value of each kind of stored option, as a caller gives it (and `get()` shows it)."""


def run_options() -> dict[str, Any]:
    """A value of every option a schedule's runs carry (whatever the table holds)."""
    return {"max_attempts": 7} | {o.name: GIVEN[o.kind or ""] for o in RUN}


@pytest.mark.parametrize("face", ["Admin", "AsyncAdmin"])
async def test_each_run_carries_every_option_its_schedule_was_given(
    client: Client, node: Planner, redis_url: str, redis_sync: redis.Redis, topic: str, face: str
) -> None:
    """Each option of the table a run carries reaches every run (its envelope, `get()`), by
    either admin; an ordered one joins its key's order before it is written."""
    t0 = ms("UTC", 2027, 1, 1, 12, 0)
    given = run_options()
    if face == "Admin":
        made = Admin.of(client).schedule(
            "tick", topic, "p", every_ms=60_000, start=t0 / 1000, **given
        )
    else:
        async with AsyncAdmin.from_url(redis_url) as admin:
            made = await admin.schedule(
                "tick", topic, "p", every_ms=60_000, start=t0 / 1000, **given
            )
    shown = {o.name: GIVEN[o.kind or ""] for o in RUN}
    assert made.run_options == shown and made.max_attempts == 7
    node.clock.set(t0 - 10 * 60_000)
    await node.materializer.plan_once()
    runs = written(redis_sync, topic, "tick")
    assert runs[0] == t0 and len(runs) == 51
    for at in (runs[0], runs[-1]):
        info = client.get(topic, f"tick@{at}")
        assert info.max_attempts == 7 and info.payload == "p"
        not_run = {o.name: None for o in STORED if not o.runs}  # a trace, an expiry
        assert info.options == shown | not_run
    jobs, _ = order_keys(topic, given["key"])
    assert redis_sync.zrange(jobs, 0, -1, withscores=True) == [
        (f"tick@{at}".encode(), at) for at in runs
    ]


async def test_a_schedule_stored_by_the_previous_version_still_runs_with_its_callback(
    client: Client,
    node: Planner,
    redis_sync: redis.Redis,
    redis_async: redis.asyncio.Redis,
    topic: str,
) -> None:
    """A record of version 1 (its runs' callback in ``callback``, no ``options``) loads,
    lists, and its runs carry its callback and max_attempts."""
    t0 = ms("UTC", 2027, 1, 1, 12, 0)
    record = {
        "v": 1, "cron": None, "every_ms": 60_000, "tz": "UTC", "anchor_ms": t0, "start_ms": t0,
        "end_ms": None, "misfire": "once", "max_catch_up": 100,
        "payload": encode_payload("p", 1000), "max_attempts": 4,
        "callback": Callback(HOOK).pack(), "updated_ms": 1,
    }  # fmt: skip
    await _store_as_an_older_wheelq(redis_async, topic, "old", msgpack.packb(record))
    admin = Admin.of(client)
    try:
        (listed,) = admin.schedules(topic)
        assert listed.error is None and listed.callback == Callback(HOOK).pack()
        unset = view(stored_unset(), RUN)  # (the others: as a run without them shows)
        given = {n: v for n, v in listed.run_options.items() if v != unset[n]}
        assert given == {"callback": HOOK}
        node.clock.set(t0 - 10 * 60_000)
        await node.materializer.plan_once()
        assert written(redis_sync, topic, "old")[0] == t0
        info = client.get(topic, f"old@{t0}")
        assert info.max_attempts == 4 and info.options["callback"] == HOOK
    finally:  # the server is shared: schedules() of other tests reads every topic's
        admin.unschedule("old", topic)
