"""Actions on many jobs (issue 47, item 3), on real servers and a cluster: each action acts
on exactly the jobs its dry run counted, and jobs that moved on in between (cancelled, fired,
dead letters replayed) are reported as changed, not acted on, while jobs that came into the
filter after the dry run are left alone; so are jobs rescheduled, or cancelled and enqueued
again under their id, in between (issue 57, item 5: `Drift`, in the hot set and the far
tier, through every face); slices go on from where they stopped; bad input is a typed error
naming its parameter. docs/architecture.md, "Bulk actions"."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, get_args

import pytest
import redis

from tests.support.cli import assert_one_line_error, run_wheelq
from tests.support.clients import MakeClient, admin_of
from tests.support.far import far_ids
from tests.support.waiting import eventually
from tests.support.web import Served, assert_problem, serving
from wheelq import AsyncAdmin, AsyncClient, Client, EnqueueItem, InvalidArgumentError, Worker
from wheelq.core.bulk_actions import BULK_ACTIONS
from wheelq.core.history import JobState
from wheelq.core.job_list import LIST_STATES
from wheelq.core.keys import ShardKeys
from wheelq.errors import SelectionGoneError, UnknownTopicError
from wheelq.web.models import BulkActionName, ListStateName

pytestmark = pytest.mark.cluster_too

SHARDS = 4
BASE = 2_000_000_000  # epoch seconds far ahead (2033): nothing fires by itself
HOUR_MS = 3_600_000


async def enqueue_range(
    client: AsyncClient, topic: str, prefix: str, n: int, at: float
) -> list[str]:
    ids = [f"{prefix}{i:05d}" for i in range(n)]
    for start in range(0, n, 1000):
        await client.enqueue_many(
            topic,
            [
                EnqueueItem(payload={"i": i}, at=at + i / 1000, job_id=ids[i])
                for i in range(start, min(n, start + 1000))
            ],
        )
    return ids


TIERS = ("hot", "far")


@dataclass(frozen=True)
class Drift:
    """Six jobs `IDS` of `topic`, due a second apart from `at_s` in the hot set (half an
    hour ahead: within the far horizon) or in the far tier (2033), all in the filter window
    [at_s, at_s + 60). Between a dry run and its act, `drift` reschedules `MOVED` out of the
    window (to `moved_to_s`, in the same tier) and cancels `AGAIN` and enqueues it again
    under its id, due as before, with a new payload: the act must leave both alone and
    count them as changed."""

    client: AsyncClient
    topic: str
    tier: str
    at_s: int
    moved_to_s: int

    IDS = tuple(f"k{i}" for i in range(6))
    MOVED, AGAIN = "k1", "k3"

    @classmethod
    async def make(cls, client: AsyncClient, topic: str, tier: str) -> Drift:
        if tier == "hot":
            at_s = int(time.time()) + 1800
            moved_to_s = at_s + 600
        else:
            at_s, moved_to_s = BASE, BASE + 3600
        for i, job_id in enumerate(cls.IDS):
            await client.enqueue(topic, {"i": i}, at=at_s + i, job_id=job_id)
        return cls(client, topic, tier, at_s, moved_to_s)

    @property
    def window_ms(self) -> tuple[int, int]:
        return self.at_s * 1000, (self.at_s + 60) * 1000

    @property
    def acted_on(self) -> list[str]:
        return [j for j in self.IDS if j not in (self.MOVED, self.AGAIN)]

    async def drift(self) -> None:
        assert await self.client.reschedule(self.topic, self.MOVED, at=self.moved_to_s)
        assert await self.client.cancel(self.topic, self.AGAIN)
        again = self.at_s + self.IDS.index(self.AGAIN)
        await self.client.enqueue(self.topic, {"again": True}, at=again, job_id=self.AGAIN)

    async def check_left_alone(self, r: redis.Redis, shards: int = SHARDS) -> None:
        """`MOVED` and `AGAIN` as `drift` left them, in their tier."""
        moved = await self.client.get(self.topic, self.MOVED)
        assert (moved.state, moved.due_ms) == (JobState.PENDING, self.moved_to_s * 1000)
        again = await self.client.get(self.topic, self.AGAIN)
        due_ms = (self.at_s + self.IDS.index(self.AGAIN)) * 1000
        assert (again.state, again.due_ms, again.payload) == (
            JobState.PENDING,
            due_ms,
            {"again": True},
        )
        far = {j for s in range(shards) for j in far_ids(r, ShardKeys(self.topic, s))}
        both = {self.MOVED, self.AGAIN}
        assert far & both == (both if self.tier == "far" else set())

    async def check_cancelled(self, r: redis.Redis, shards: int = SHARDS) -> None:
        """The others cancelled, `MOVED` and `AGAIN` left alone."""
        for job_id in self.acted_on:
            assert (await self.client.get(self.topic, job_id)).state is JobState.CANCELLED
        await self.check_left_alone(r, shards)


async def pending_ids(admin: AsyncAdmin, topic: str) -> set[str]:
    out: set[str] = set()
    cursor = None
    while True:
        page = await admin.jobs(topic, "pending", 1000, cursor=cursor)
        out |= {r.id for r in page if r.id}
        if page.next is None:
            return out
        cursor = page.next


async def test_an_action_acts_on_exactly_what_its_dry_run_counted(
    client: AsyncClient, topic: str, make_client: MakeClient
) -> None:
    admin = admin_of(make_client())  # the blocking Admin and the AsyncAdmin
    inside = await enqueue_range(client, topic, "in", 300, BASE)
    outside = await enqueue_range(client, topic, "out", 50, BASE + 3600)
    window = {"state": "pending", "due_after": BASE, "due_before": BASE + 60}
    dry = await admin.bulk(topic, "cancel", dry_run=True, **window)
    assert (dry.matched, dry.acted, dry.dry_run) == (300, 0, True) and dry.selection

    # in between: some are cancelled, some fire, and new jobs come into the window
    for job_id in inside[:10]:
        assert await client.cancel(topic, job_id)
    for job_id in inside[10:15]:
        assert await client.reschedule(topic, job_id, delay=0)
    late = await enqueue_range(client, topic, "late", 20, BASE + 1)

    progress: list[tuple[int, int]] = []
    done = await admin.bulk(
        topic, "cancel", selection=dry.selection, progress=lambda *p: progress.append(p)
    )
    assert (done.matched, done.acted, done.changed, done.remaining) == (300, 285, 15, 0)
    assert done.selection is None
    assert progress and progress[-1] == (300, 300)
    assert await pending_ids(AsyncAdmin.of(client), topic) == set(outside) | set(late)
    # the selection is used up: acting on it again is refused, naming it
    with pytest.raises(InvalidArgumentError) as caught:
        await admin.bulk(topic, "cancel", selection=dry.selection)
    assert isinstance(caught.value, SelectionGoneError) and "already" in str(caught.value)


@pytest.mark.parametrize("action", ["cancel", "reschedule"])
@pytest.mark.parametrize("tier", TIERS)
async def test_an_act_leaves_jobs_rescheduled_or_enqueued_again_since_its_dry_run(
    client: AsyncClient,
    topic: str,
    make_client: MakeClient,
    redis_sync: redis.Redis,
    tier: str,
    action: str,
) -> None:
    admin = admin_of(make_client())  # the blocking Admin and the AsyncAdmin
    jobs = await Drift.make(client, topic, tier)
    low, high = jobs.window_ms
    window = {"state": "pending", "due_after": low / 1000, "due_before": high / 1000}
    moving = {"shift_ms": 10_000} if action == "reschedule" else {}
    dry = await admin.bulk(topic, action, dry_run=True, **window, **moving)
    assert (dry.matched, dry.acted) == (6, 0) and dry.selection
    await jobs.drift()
    done = await admin.bulk(topic, action, selection=dry.selection, **moving)
    assert (done.matched, done.acted, done.changed, done.skipped, done.remaining) == (
        6,
        4,
        2,
        0,
        0,
    )
    if action == "cancel":
        await jobs.check_cancelled(redis_sync)
    else:
        for job_id in jobs.acted_on:
            got = await client.get(topic, job_id)
            due_ms = (jobs.at_s + jobs.IDS.index(job_id)) * 1000 + 10_000
            assert (got.state, got.due_ms) == (JobState.PENDING, due_ms)
        await jobs.check_left_alone(redis_sync)


async def test_run_now_and_reschedule_move_exactly_the_selected_jobs(
    client: AsyncClient, topic: str
) -> None:
    admin = AsyncAdmin.of(client)
    ids = await enqueue_range(client, topic, "m", 40, BASE)
    moved = await admin.bulk(topic, "reschedule", state="pending", ids=ids[:10], shift_ms=HOUR_MS)
    assert (moved.matched, moved.acted) == (10, 10)
    at = await admin.bulk(topic, "reschedule", state="pending", ids=ids[10:20], at=BASE + 7200)
    assert at.acted == 10
    rows = {r.id: r.due_ms for r in await admin.jobs(topic, "pending", 100)}
    for i, job_id in enumerate(ids[:10]):
        assert rows[job_id] == BASE * 1000 + i + HOUR_MS
    assert all(rows[j] == (BASE + 7200) * 1000 for j in ids[10:20])
    # seconds or a timedelta, either way
    later = await admin.bulk(topic, "reschedule", state="pending", ids=ids[30:35], shift=3600)
    earlier = await admin.bulk(
        topic, "reschedule", state="pending", ids=ids[35:40], shift=timedelta(seconds=-1.5)
    )
    assert (later.acted, earlier.acted) == (5, 5)
    rows.update({r.id: r.due_ms for r in await admin.jobs(topic, "pending", 100)})
    for i, job_id in enumerate(ids[30:40], 30):
        assert rows[job_id] == BASE * 1000 + i + (HOUR_MS if i < 35 else -1500)
    now = await admin.bulk(topic, "run_now", state="pending", ids=ids[20:30])
    assert now.acted == 10
    assert {r.id for r in await admin.jobs(topic, "ready", 100)} == set(ids[20:30])
    assert set(rows) - set(ids[20:30]) == await pending_ids(admin, topic)


async def test_retrying_and_dead_jobs_by_filter(
    client: AsyncClient, topic: str, redis_url: str
) -> None:
    admin = AsyncAdmin.of(client)

    async def fails(job: Any) -> None:
        raise RuntimeError(f"no {job.id}")

    worker = Worker.from_url(
        redis_url, topic, fails, retry_base_ms=HOUR_MS, retry_jitter_pct=0, shutdown_grace_ms=0
    )
    await worker.start()
    try:
        for i in range(12):
            await client.enqueue(topic, {}, job_id=f"r{i}", max_attempts=3)
        for i in range(6):
            await client.enqueue(topic, {}, job_id=f"d{i}", max_attempts=1)

        async def settled() -> bool:
            retrying = await admin.jobs(topic, "retrying", 100)
            dead = await admin.jobs(topic, "dead", 100)
            return len(retrying) == 12 and len(dead) == 6

        await eventually(settled, timeout_s=15, what="12 retrying, 6 dead")
    finally:
        await worker.stop(grace_ms=0)
    # retries are not pending: a pending selection (bare rows, no envelopes) leaves them
    pending = await admin.bulk(topic, "cancel", state="pending", dry_run=True)
    assert pending.matched == 0
    dry = await admin.bulk(topic, "cancel", state="retrying", dry_run=True)
    assert dry.matched == 12
    # in between: a retry is moved to another time (issue 57 item 5): left alone
    moved_ms = (BASE + 7200) * 1000
    assert await client.reschedule(topic, "r0", at=moved_ms / 1000)
    done = await admin.bulk(topic, "cancel", selection=dry.selection)
    assert (done.acted, done.changed) == (11, 1)
    (left,) = await admin.jobs(topic, "retrying")
    assert (left.id, left.due_ms) == ("r0", moved_ms)
    named = await admin.bulk(topic, "cancel", state="retrying", ids=["r0"])  # as it is now
    assert (named.matched, named.acted) == (1, 1)
    assert list(await admin.jobs(topic, "retrying")) == []

    dead = list(await admin.jobs(topic, "dead", 100))
    replayed = await admin.bulk(topic, "replay", refs=[d.ref for d in dead[:3]])
    assert (replayed.matched, replayed.acted, replayed.changed) == (3, 3, 0)
    ready = {r.id for r in await admin.jobs(topic, "ready", 100)}
    assert ready >= {d.id for d in dead[:3]}
    dry = await admin.bulk(topic, "purge", state="dead", reason="failed", dry_run=True)
    assert dry.matched == 3
    assert (await admin.replay(topic, [dead[3].ref])) == 1  # moves on before the purge
    done = await admin.bulk(topic, "purge", selection=dry.selection)
    assert (done.acted, done.changed) == (2, 1)
    assert list(await admin.jobs(topic, "dead")) == []
    none = await admin.bulk(topic, "replay", refs=[dead[4].ref])
    assert (none.matched, none.acted) == (0, 0)


async def test_slices_go_on_where_they_stopped(client: AsyncClient, topic: str) -> None:
    admin = AsyncAdmin.of(client)
    await enqueue_range(client, topic, "s", 1200, BASE)
    dry = await admin.bulk(topic, "cancel", state="pending", dry_run=True)
    token, acted = dry.selection, 0
    slices = 0
    while token is not None:
        part = await admin.bulk(topic, "cancel", selection=token, max_jobs=500)
        assert part.acted <= 500
        acted += part.acted
        token = part.selection
        slices += 1
        if token is not None:
            assert part.remaining == 1200 - acted
    assert (acted, slices) == (1200, 3)
    assert await pending_ids(admin, topic) == set()


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_bad_input_is_a_typed_error_and_changes_nothing(
    kind: str, client: AsyncClient, topic: str, redis_url: str
) -> None:
    ids = await enqueue_range(client, topic, "b", 5, BASE)
    dry = await AsyncAdmin.of(client).bulk(topic, "cancel", state="pending", dry_run=True)
    assert dry.selection is not None
    cases: list[tuple[str, dict[str, Any]]] = [
        ("filter", {"action": "cancel"}),
        ("action", {"action": "explode", "state": "pending"}),
        ("action", {"action": "replay", "state": "pending"}),
        ("action", {"action": "cancel", "state": "dead"}),
        ("state", {"action": "cancel", "state": "scheduled"}),
        ("selection", {"action": "cancel", "ids": ids, "selection": dry.selection}),
        ("ids", {"action": "cancel", "state": "pending", "ids": ["x"] * 10_001}),
        ("ids", {"action": "cancel", "state": "pending", "ids": "b00000"}),
        ("job_id", {"action": "cancel", "state": "pending", "ids": ["bad\nid"]}),
        ("refs", {"action": "purge", "refs": ["not-a-ref"]}),
        ("ids", {"action": "purge", "state": "dead", "ids": ids}),
        ("selection", {"action": "cancel", "selection": "garbage"}),
        ("at", {"action": "reschedule", "state": "pending"}),
        ("at", {"action": "reschedule", "state": "pending", "at": BASE, "shift_ms": 5}),
        ("shift_ms", {"action": "reschedule", "state": "pending", "shift_ms": 10**15}),
        ("shift", {"action": "reschedule", "state": "pending", "shift": 1, "shift_ms": 1000}),
        ("shift", {"action": "reschedule", "state": "pending", "shift": float("nan")}),
        ("shift", {"action": "reschedule", "state": "pending", "shift": "5"}),
        ("shift", {"action": "reschedule", "state": "pending", "shift": True}),
        ("shift", {"action": "reschedule", "state": "pending", "shift": -(10**10)}),
        ("at", {"action": "cancel", "state": "pending", "at": BASE}),
        ("max_jobs", {"action": "cancel", "state": "pending", "max_jobs": 0}),
        ("due_after", {"action": "purge", "state": "dead", "due_after": BASE}),
    ]
    if kind == "sync":
        with Client.from_url(redis_url) as c:
            admin = admin_of(c)
            for name, kw in cases:
                with pytest.raises(InvalidArgumentError) as caught:
                    admin.bulk(topic, **kw)
                assert caught.value.parameter == name, (name, caught.value)
            with pytest.raises(InvalidArgumentError) as caught:
                admin.bulk(topic + "x", "cancel", selection=dry.selection)
            assert caught.value.parameter == "selection"
            with pytest.raises(UnknownTopicError):
                admin.bulk(topic + "x", "cancel", state="pending")
    else:
        admin = AsyncAdmin.of(client)
        for name, kw in cases:
            with pytest.raises(InvalidArgumentError) as caught:
                await admin.bulk(topic, **kw)
            assert caught.value.parameter == name, (name, caught.value)
    assert await pending_ids(AsyncAdmin.of(client), topic) == set(ids)
    nothing = await AsyncAdmin.of(client).bulk(
        topic, "cancel", state="pending", due_before=BASE - 1, dry_run=True
    )
    assert (nothing.matched, nothing.selection) == (0, None)
    keys = ShardKeys(topic, 0)
    assert keys.topic == topic


# --- over HTTP ---------------------------------------------------------------------------------


@pytest.fixture
async def api(redis_url: str) -> AsyncIterator[Served]:
    async with serving(redis_url) as served:
        yield served


def test_the_schemas_spell_the_core_values() -> None:
    assert get_args(BulkActionName) == BULK_ACTIONS
    assert get_args(ListStateName) == LIST_STATES


async def test_http_dry_run_then_act_on_its_selection(
    api: Served, client: AsyncClient, topic: str
) -> None:
    ids = await enqueue_range(client, topic, "h", 30, BASE)
    bulk = f"/v1/topics/{topic}/jobs/bulk"
    body = {
        "action": "cancel",
        "filter": {"state": "pending", "due_before": (BASE * 1000) + 20},
        "dry_run": True,
    }
    status, dry, _ = await api.call("POST", bulk, body)
    assert status == 200, dry
    assert (dry["matched"], dry["acted"], dry["dry_run"]) == (20, 0, True)
    assert await client.cancel(topic, ids[0])
    status, done, _ = await api.call(
        "POST", bulk, {"action": "cancel", "selection": dry["selection"]}
    )
    assert status == 200, done
    assert (done["acted"], done["changed"], done["remaining"], done["selection"]) == (
        19,
        1,
        0,
        None,
    )
    admin = AsyncAdmin.of(client)
    assert await pending_ids(admin, topic) == set(ids[20:])
    status, moved, _ = await api.call(
        "POST",
        bulk,
        {
            "action": "reschedule",
            "filter": {"state": "pending"},
            "ids": ids[20:25],
            "shift_ms": 1000,
        },
    )
    assert (status, moved["acted"]) == (200, 5), moved


@pytest.mark.parametrize("tier", TIERS)
async def test_http_act_leaves_jobs_rescheduled_or_enqueued_again_since_its_dry_run(
    api: Served, client: AsyncClient, topic: str, redis_sync: redis.Redis, tier: str
) -> None:
    jobs = await Drift.make(client, topic, tier)
    low, high = jobs.window_ms
    bulk = f"/v1/topics/{topic}/jobs/bulk"
    body = {
        "action": "cancel",
        "filter": {"state": "pending", "due_after": low, "due_before": high},
        "dry_run": True,
    }
    status, dry, _ = await api.call("POST", bulk, body)
    assert (status, dry["matched"]) == (200, 6), dry
    await jobs.drift()
    status, done, _ = await api.call(
        "POST", bulk, {"action": "cancel", "selection": dry["selection"]}
    )
    assert status == 200, done
    assert (done["acted"], done["changed"], done["remaining"]) == (4, 2, 0)
    await jobs.check_cancelled(redis_sync)


async def test_http_bad_bulk_input_is_a_problem_naming_the_field(
    api: Served, client: AsyncClient, topic: str
) -> None:
    await enqueue_range(client, topic, "x", 3, BASE)
    bulk = f"/v1/topics/{topic}/jobs/bulk"
    attacks: list[tuple[Any, int, str | None]] = [
        ({"action": "cancel"}, 422, "filter"),
        ({"action": "cancel", "dry_run": True}, 422, "filter"),
        ({"action": "nuke", "filter": {"state": "pending"}}, 422, "action"),
        ({"action": "replay", "filter": {"state": "pending"}}, 422, "action"),
        ({"action": "cancel", "filter": {"state": "scheduled"}}, 422, "filter.state"),
        ({"action": "cancel", "filter": {"state": "ready"}}, 422, "action"),
        (
            {"action": "cancel", "filter": {"state": "pending", "reason": "failed"}},
            422,
            "filter.reason",
        ),
        (
            {"action": "cancel", "filter": {"state": "pending", "due_after": "soon"}},
            422,
            "filter.due_after",
        ),
        ({"action": "cancel", "filter": {"state": "pending"}, "ids": ["a"] * 10_001}, 422, "ids"),
        (
            {"action": "cancel", "filter": {"state": "pending"}, "selection": "nope"},
            422,
            "selection",
        ),
        ({"action": "cancel", "selection": "A" * 300}, 422, "selection"),
        ({"action": "purge", "refs": ["1/x"]}, 422, "refs[0]"),
        ({"action": "reschedule", "filter": {"state": "pending"}}, 422, "at"),
        (
            {"action": "reschedule", "filter": {"state": "pending"}, "shift_ms": 1.5},
            422,
            "shift_ms",
        ),
        ({"action": "cancel", "filter": {"state": "pending"}, "extra": 1}, 422, "extra"),
        ([], 422, None),
    ]
    for body, status, field in attacks:
        got = await api.call("POST", bulk, body)
        assert_problem(got, status, field)
    status, none, _ = await api.call(
        "POST", bulk, {"action": "cancel", "filter": {"state": "retrying"}, "dry_run": True}
    )
    assert (status, none["matched"], none["selection"]) == (200, 0, None)
    got = await api.call(
        "POST",
        f"/v1/topics/{topic}z/jobs/bulk",
        {"action": "cancel", "filter": {"state": "pending"}},
    )
    assert_problem(got, 404, None)
    assert len(await pending_ids(AsyncAdmin.of(client), topic)) == 3


async def test_cli_dry_run_then_act_on_the_selection(
    client: AsyncClient, topic: str, redis_url: str
) -> None:
    ids = await enqueue_range(client, topic, "c", 12, BASE)
    url = ("--redis-url", redis_url)
    dry = await asyncio.to_thread(
        run_wheelq, "jobs", "bulk", topic, "cancel", "--state", "pending", "--dry-run", *url
    )
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines()[0] == "12 pending jobs match"
    token = dry.stdout.split("--selection ")[1].strip()
    assert await client.cancel(topic, ids[0])
    done = await asyncio.to_thread(
        run_wheelq, "jobs", "bulk", topic, "cancel", "--selection", token, "--json", *url
    )
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout)
    assert (outcome["acted"], outcome["changed"]) == (11, 1)
    bad = await asyncio.to_thread(run_wheelq, "jobs", "bulk", topic, "cancel", *url)
    assert_one_line_error(bad, 2, "--filter")
    wrong = await asyncio.to_thread(
        run_wheelq, "jobs", "bulk", topic, "replay", "--state", "pending", *url
    )
    assert_one_line_error(wrong, 2, "replay acts on dead")


@pytest.mark.parametrize("tier", TIERS)
async def test_cli_act_leaves_jobs_rescheduled_or_enqueued_again_since_its_dry_run(
    client: AsyncClient, topic: str, redis_url: str, redis_sync: redis.Redis, tier: str
) -> None:
    jobs = await Drift.make(client, topic, tier)
    url = ("--redis-url", redis_url)
    window = ("--due-after", str(jobs.at_s), "--due-before", str(jobs.at_s + 60))
    dry = await asyncio.to_thread(
        run_wheelq, "jobs", "bulk", topic, "cancel", "--state", "pending", *window,
        "--dry-run", *url,
    )  # fmt: skip
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines()[0] == "6 pending jobs match"
    token = dry.stdout.split("--selection ")[1].strip()
    await jobs.drift()
    done = await asyncio.to_thread(
        run_wheelq, "jobs", "bulk", topic, "cancel", "--selection", token, *url
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "cancel: acted on 4 of 6; 2 had changed state (left alone); 0 skipped"
    )
    await jobs.check_cancelled(redis_sync)
