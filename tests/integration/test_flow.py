"""Flow control on a real server with three workers of one group (`wheelq.core.flow`): the
group's rate and each key's rate hold in every 1 s window (one start of burst aside), a key
never has more than its concurrency running, and a job held back keeps its attempt."""

from __future__ import annotations

import asyncio
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from tests.support.waiting import eventually
from wheelq import AsyncClient, EnqueueItem, Flow, Job, Scheduler, Worker
from wheelq.errors import InvalidArgumentError

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


def most_in_one_second(starts: list[float]) -> int:
    """The most starts in any window of 1 s (each window opening at a start)."""
    starts = sorted(starts)
    return max(sum(1 for t in starts[i:] if t < s + 1.0) for i, s in enumerate(starts))


async def test_the_groups_rate_holds_across_three_workers(
    redis_url: str, topic: str, scheduler: Scheduler
) -> None:
    starts: list[float] = []
    attempts: list[int] = []

    async def record(job: Job) -> None:
        starts.append(time.monotonic())
        attempts.append(job.attempt)

    items = [EnqueueItem(i, delay=0.2) for i in range(60)]
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
    items = [EnqueueItem({"k": k, "n": n}, delay=0.2) for n in range(20) for k in "ab"]
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
    items = [EnqueueItem({"k": k, "n": n}, delay=0.2) for n in range(15) for k in "xyz"]
    await run_all(redis_url, topic, flow, items, work, lambda: len(attempts))
    assert max(most.values()) <= 2
    assert min(most.values()) == 2, "no key ever reached its limit: the test proved nothing"
    assert set(attempts) == {1}  # deferrals keep the attempt


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"rate": "10/x"}, "rate"),
        ({"rate": "0/s"}, "rate"),
        ({"key_rate": "5/s"}, "key"),
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
