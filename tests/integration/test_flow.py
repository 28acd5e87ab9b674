"""Flow control on a real server with three workers of one group (`wheelq.core.flow`): the
group's rate and each key's rate hold in every 1 s window (one start of burst aside), a key
never has more than its concurrency running, and a job held back keeps its attempt."""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
import redis.asyncio

from tests.support.waiting import eventually
from wheelq import AsyncAdmin, AsyncClient, Client, EnqueueItem, Flow, Job, Retry, Scheduler, Worker
from wheelq.core.flow import order_keys
from wheelq.core.history import JobState
from wheelq.errors import InvalidArgumentError
from wheelq.runtime.role import executor_of
from wheelq.store import flow as flow_calls

WORKERS = 3


@pytest.fixture
async def scheduler(redis_url: str, topic: str) -> AsyncIterator[Scheduler]:
    node = Scheduler.from_url(redis_url, topic, preload_interval_ms=100)
    await node.start()
    yield node
    await node.stop()


async def run_all(
    redis_url: str,
    topic: str,
    flow: Flow,
    items: list[EnqueueItem],
    handler: Callable[[Job], Awaitable[None]],
    done: Callable[[], int],
) -> None:
    """Enqueue `items`, run them on three workers under `flow` until `done()` counts all."""
    workers = [
        Worker.from_url(redis_url, topic, handler, flow=flow, concurrency=8) for _ in range(WORKERS)
    ]
    for w in workers:
        await w.start()
    try:
        async with AsyncClient.from_url(redis_url) as c:
            await c.enqueue_many(topic, items)
        await eventually(
            lambda: _at_least(done, len(items)), timeout_s=30, what=f"{len(items)} jobs to run"
        )
    finally:
        for w in workers:
            await w.stop()


async def _at_least(count: Callable[[], int], n: int) -> bool:
    return count() >= n


JITTER_S = 0.1
"""How much later than its token a handler may start on a loaded machine (the task switch,
the delivery): starts are counted in windows this much shorter than the second the tokens
are counted in on the Redis clock, so that lag cannot bunch two seconds' starts into one."""


def most_in_one_second(starts: list[float]) -> int:
    """The most starts in any window of 1 s less `JITTER_S` (each opening at a start)."""
    starts = sorted(starts)
    window = 1.0 - JITTER_S
    return max(sum(1 for t in starts[i:] if t < s + window) for i, s in enumerate(starts))


async def test_the_groups_rate_holds_across_three_workers(
    redis_url: str, topic: str, scheduler: Scheduler
) -> None:
    starts: list[float] = []
    attempts: list[int] = []

    async def record(job: Job) -> None:
        starts.append(time.monotonic())
        attempts.append(job.attempt)

    items = [EnqueueItem(payload=i, delay=0.2) for i in range(60)]
    await run_all(redis_url, topic, Flow(rate="20/s"), items, record, lambda: len(starts))
    assert most_in_one_second(starts) <= 20 + 1
    assert max(starts) - min(starts) >= 59 / 20 * 0.95  # spaced: the limit was in force
    assert set(attempts) == {1}  # waiting for a token is not an attempt


async def test_each_keys_rate_holds_and_keys_do_not_wait_for_each_other(
    redis_url: str, topic: str, scheduler: Scheduler
) -> None:
    starts: dict[str, list[float]] = defaultdict(list)

    async def record(job: Job) -> None:
        starts[job.payload["k"]].append(time.monotonic())

    flow = Flow(key=lambda job: job.payload["k"], key_rate="10/s")
    items = [EnqueueItem(payload={"k": k, "n": n}, delay=0.2) for n in range(20) for k in "ab"]
    total = lambda: sum(map(len, starts.values()))  # noqa: E731
    await run_all(redis_url, topic, flow, items, record, total)
    for k in "ab":
        assert most_in_one_second(starts[k]) <= 10 + 1, k
    # Run side by side: key b's first start did not wait for a's 20 starts.
    assert min(starts["b"]) < max(starts["a"]) - 1.0


async def test_a_key_never_runs_more_than_its_concurrency(
    redis_url: str, topic: str, scheduler: Scheduler
) -> None:
    running: Counter[str] = Counter()
    most: Counter[str] = Counter()
    attempts: list[int] = []

    async def work(job: Job) -> None:
        k = job.payload["k"]
        running[k] += 1
        most[k] = max(most[k], running[k])
        attempts.append(job.attempt)
        try:
            await asyncio.sleep(0.02)  # the work
        finally:
            running[k] -= 1

    flow = Flow(key=lambda job: job.payload["k"], key_concurrency=2, retry_ms=10)
    items = [EnqueueItem(payload={"k": k, "n": n}, delay=0.2) for n in range(15) for k in "xyz"]
    await run_all(redis_url, topic, flow, items, work, lambda: len(attempts))
    assert max(most.values()) <= 2
    assert min(most.values()) == 2, "no key ever reached its limit: the test proved nothing"
    assert set(attempts) == {1}  # deferrals keep the attempt


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"rate": "10/x"}, "rate"),
        ({"rate": "0/s"}, "rate"),
        ({"key": len, "key_concurrency": 0}, "key_concurrency"),
        ({"key": "tenant"}, "key"),
        ({"rate": "5/s", "burst": 0}, "burst"),
        ({"rate": "5/s", "max_wait_ms": -1}, "max_wait_ms"),
    ],
)
def test_bad_flow_limits_are_refused_naming_the_parameter(kwargs: dict, parameter: str) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        Flow(**kwargs)
    assert info.value.parameter == parameter


async def test_a_keys_ordered_jobs_run_one_at_a_time_in_due_order_across_workers(
    redis_url: str, topic: str, scheduler: Scheduler
) -> None:
    rng = random.Random(7)
    started: dict[str, list[tuple[int, str]]] = defaultdict(list)
    running: Counter[str] = Counter()
    most: Counter[str] = Counter()
    fails_once = {"b-3"}

    async def work(job: Job) -> None:
        assert job.key is not None and job.ordered
        running[job.key] += 1
        most[job.key] = max(most[job.key], running[job.key])
        try:
            await asyncio.sleep(0.005)  # the work
            if job.id in fails_once:
                fails_once.discard(job.id)
                raise Retry(delay=0.05)  # it holds the key's later jobs until it succeeds
            started[job.key].append((job.due_ms, job.id))
        finally:
            running[job.key] -= 1

    # Enqueued in a shuffled order, due in another: the order that counts is the due one.
    items = [
        EnqueueItem(payload=n, delay=0.3 + rng.random(), job_id=f"{k}-{n}", key=k, ordered=True)
        for k in "abc"
        for n in range(12)
    ]
    rng.shuffle(items)
    async with AsyncAdmin.from_url(redis_url) as admin:
        await admin.create_topic(topic, 4)
    done = lambda: sum(map(len, started.values()))  # noqa: E731
    await run_all(redis_url, topic, Flow(retry_ms=10), items, work, done)
    for k in "abc":
        assert started[k] == sorted(started[k]), k
        assert len(started[k]) == 12
    assert max(most.values()) == 1


async def test_a_registration_whose_job_was_never_written_does_not_block_its_key(
    redis_url: str, redis_async: redis.asyncio.Redis, topic: str, scheduler: Scheduler
) -> None:
    ran: list[str] = []

    async def record(job: Job) -> None:
        ran.append(job.id)

    # A producer registered "ghost" in key k's order, then died before writing it.
    ghost_due = int(time.time() * 1000) - 60_000
    await executor_of(redis_async).run(
        [flow_calls.order_register(order_keys(topic, "k"), [("ghost", ghost_due)])]
    )
    items = [EnqueueItem(payload=1, job_id="real", key="k", ordered=True, delay=0.1)]
    await run_all(redis_url, topic, Flow(retry_ms=10), items, record, lambda: len(ran))
    assert ran == ["real"]


def test_ordered_needs_a_key_and_a_key_must_be_printable(redis_url: str, topic: str) -> None:
    with Client.from_url(redis_url) as c:
        for kwargs, parameter in (
            ({"ordered": True}, "ordered"),
            ({"key": ""}, "key"),
            ({"key": "a\nb"}, "key"),
            ({"key": "x" * 300}, "key"),
        ):
            with pytest.raises(InvalidArgumentError) as info:
                c.enqueue(topic, 1, job_id="j", **kwargs)
            assert info.value.parameter == parameter
            assert c.get(topic, "j").state is JobState.UNKNOWN
