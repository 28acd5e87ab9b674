"""Pull consumers written with nothing but an HTTP client: two of them share 10,000 jobs,
one stops mid-run holding a batch it never acks, and the other ends with every job acked
exactly once (the stopped one's batch taken over after the visibility timeout). Also:
receipts, nack and its retry, long polling, and bad input."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import redis.asyncio

from tests.support.waiting import eventually
from tests.support.web import Served, serving
from wheelq.core.keys import ShardKeys, shard_of
from wheelq.core.settings import WorkerSettings

pytestmark = pytest.mark.cluster_too  # on the single server and on the cluster

JOBS = 10_000
VISIBILITY_MS = 2500


@pytest.fixture
async def api(redis_url: str) -> AsyncIterator[Served]:
    ws = WorkerSettings(visibility_timeout_ms=VISIBILITY_MS, claim_interval_ms=100)
    async with serving(redis_url, worker_settings=ws) as served:
        yield served


async def made_group(api: Served, topic: str, group: str) -> str:
    """Create consumer group `group` of `topic` (a pull never creates one); its path."""
    status, body, _ = await api.call("POST", f"/v1/topics/{topic}/groups", {"name": group})
    assert status == 201, body
    return f"/v1/topics/{topic}/groups/{group}"


class PullClient:
    """A consumer as any language would write it: pull, handle, ack, over HTTP only."""

    def __init__(self, base: str, topic: str, name: str, tally: Counter[str]) -> None:
        self.group = f"{base}/v1/topics/{topic}/groups/workers"
        self.name = name
        self.tally = tally
        """Acks of every client: a client stops once they cover every job."""
        self.handled: list[str] = []
        self.acked = 0
        self.held_back: list[dict[str, Any]] = []

    async def pull(self, http: aiohttp.ClientSession, n: int = 100) -> list[dict[str, Any]]:
        body = {"max": n, "wait_ms": 200, "consumer": self.name}
        async with http.post(f"{self.group}/pull", json=body) as r:
            assert r.status == 200, await r.text()
            jobs: list[dict[str, Any]] = (await r.json())["jobs"]
            return jobs

    async def ack(self, http: aiohttp.ClientSession, jobs: list[dict[str, Any]]) -> None:
        receipts = [j["receipt"] for j in jobs]
        async with http.post(f"{self.group}/ack", json={"receipts": receipts}) as r:
            assert r.status == 200, await r.text()
            acked = (await r.json())["acked"]
            self.acked += acked
            self.tally["acked"] += acked

    async def run(self, stop_after: int | None = None) -> None:
        async with aiohttp.ClientSession() as http:
            deadline = time.monotonic() + 60
            while self.tally["acked"] < JOBS and time.monotonic() < deadline:
                jobs = await self.pull(http)
                if stop_after is not None and len(self.handled) >= stop_after and jobs:
                    self.held_back = jobs  # it "crashes" holding these: never acked
                    return
                self.handled += [j["id"] for j in jobs]
                if jobs:
                    await self.ack(http, jobs)


async def test_two_pull_clients_one_stopping_mid_run_handle_every_job_exactly_once(
    api: Served, topic: str
) -> None:
    jobs = [{"payload": {"n": i}, "id": f"job-{i}"} for i in range(JOBS)]
    for i in range(0, JOBS, 2000):
        status, body, _ = await api.call(
            "POST", f"/v1/topics/{topic}/jobs/batch", {"jobs": jobs[i : i + 2000]}
        )
        assert status == 200 and all(r["status"] == 201 for r in body["results"])
    await made_group(api, topic, "workers")
    tally: Counter[str] = Counter()
    a = PullClient(api.base, topic, "a", tally)
    b = PullClient(api.base, topic, "b", tally)
    # b stops mid-run; a runs on until every job is acked, b's unacked batch included.
    await asyncio.gather(a.run(), b.run(stop_after=JOBS // 5))

    assert b.held_back, "b never stopped mid-run"
    assert a.acked + b.acked == JOBS
    acked_ids = Counter(a.handled + b.handled)
    assert set(acked_ids) == {j["id"] for j in jobs}
    assert set(j["id"] for j in b.held_back) <= set(a.handled), "b's batch was not taken over"
    twice = [i for i, n in acked_ids.items() if n > 1]
    assert twice == [], f"{len(twice)} jobs handled twice"
    status, stats, _ = await api.call("GET", f"/v1/topics/{topic}")
    assert stats["pending"] == 0


async def test_a_nack_retries_after_the_delay_then_dead_letters_on_the_last_attempt(
    api: Served, topic: str
) -> None:
    await api.call(
        "POST", f"/v1/topics/{topic}/jobs", {"payload": "x", "id": "n", "max_attempts": 2}
    )
    group = await made_group(api, topic, "g")
    _, first, _ = await api.call("POST", f"{group}/pull", {"max": 10})
    (job,) = first["jobs"]
    assert (job["id"], job["attempt"], job["deliveries"]) == ("n", 1, 1)
    status, body, _ = await api.call(
        "POST", f"{group}/nack", {"receipts": [job["receipt"]], "delay_ms": 0}
    )
    assert (status, body["retried"], body["dead_lettered"]) == (200, 1, 0)
    _, info, _ = await api.call("GET", f"/v1/topics/{topic}/jobs/n")
    assert info["state"] in ("retrying", "ready")
    # The retry goes back through the sorted set: it fires once a scheduler leads the shard,
    # or, due now, at once when rescheduled.
    await api.call("PATCH", f"/v1/topics/{topic}/jobs/n", {"delay_ms": 0})
    _, second, _ = await api.call("POST", f"{group}/pull", {"max": 10, "wait_ms": 2000})
    (again,) = second["jobs"]
    assert (again["id"], again["attempt"]) == ("n", 2)
    _, body, _ = await api.call("POST", f"{group}/nack", {"receipts": [again["receipt"]]})
    assert (body["retried"], body["dead_lettered"]) == (0, 1)
    assert body["results"] == [{"status": 200, "outcome": "dead_lettered"}]
    _, dead, _ = await api.call("GET", f"/v1/topics/{topic}/dead")
    assert [d["job_id"] for d in dead["dead"]] == ["n"]
    # Settling twice changes nothing.
    assert (await api.call("POST", f"{group}/ack", {"receipts": [again["receipt"]]}))[1] == {
        "acked": 0,
        "results": [{"status": 200, "outcome": "settled_before"}],
    }


async def pulled_again(api: Served, group: str, consumer: str, ids: set[str]) -> dict[str, Any]:
    """The jobs `ids` pulled by `consumer` once the visibility timeout of an earlier pull has
    passed (each taken over, its deliveries counted up), by id."""
    got: dict[str, Any] = {}

    async def pull() -> bool:
        _, body, _ = await api.call("POST", f"{group}/pull", {"max": 10, "consumer": consumer})
        got.update({j["id"]: j for j in body["jobs"]})
        return set(got) == ids

    await eventually(pull, timeout_s=VISIBILITY_MS / 1000 * 20, what=f"{consumer}'s pull")
    return got


async def pending_to(r: redis.asyncio.Redis, topic: str, shards: int, job_id: str) -> Any:
    """(consumer, deliveries) the job's entry is pending to in group g, or None."""
    stream = ShardKeys(topic, shard_of(job_id, shards)).stream
    rows = await r.xpending_range(stream, "g", min="-", max="+", count=10)
    return [(row["consumer"].decode(), row["times_delivered"]) for row in rows] or None


async def test_a_stale_receipt_settles_nothing_and_the_newer_one_acks(
    api: Served, topic: str, redis_async: redis.asyncio.Redis
) -> None:
    await api.call("POST", f"/v1/topics/{topic}/jobs", {"payload": "x", "id": "s"})
    shards = await api.service.admin.create_topic(topic)
    group = await made_group(api, topic, "g")
    _, first, _ = await api.call("POST", f"{group}/pull", {"max": 1, "consumer": "a"})
    (old,) = first["jobs"]
    new = (await pulled_again(api, group, "b", {"s"}))["s"]
    assert (old["deliveries"], new["deliveries"]) == (1, 2)
    for path, body in [("ack", {}), ("nack", {"delay_ms": 0})]:
        status, problem, headers = await api.call(
            "POST", f"{group}/{path}", {"receipts": [old["receipt"]], **body}
        )
        assert status == 409, problem
        assert headers["Content-Type"].startswith("application/problem+json")
        assert (problem["title"], problem["field"]) == ("Stale receipt", "receipts[0]")
        assert "nothing was changed" in problem["detail"]
        assert await pending_to(redis_async, topic, shards, "s") == [("http:b", 2)]
        _, info, _ = await api.call("GET", f"/v1/topics/{topic}/jobs/s")
        assert (info["state"], info["attempt"]) == ("running", 1)
    status, body, _ = await api.call("POST", f"{group}/ack", {"receipts": [new["receipt"]]})
    assert (status, body) == (200, {"acked": 1, "results": [{"status": 200, "outcome": "acked"}]})
    _, info, _ = await api.call("GET", f"/v1/topics/{topic}/jobs/s")
    assert info["state"] == "succeeded"
    assert await pending_to(redis_async, topic, shards, "s") is None


async def test_a_batch_of_stale_and_fresh_receipts_answers_each(
    api: Served, topic: str, redis_async: redis.asyncio.Redis
) -> None:
    jobs = [{"payload": n, "id": n} for n in ("x", "y", "z")]
    await api.call("POST", f"/v1/topics/{topic}/jobs/batch", {"jobs": jobs})
    shards = await api.service.admin.create_topic(topic)
    group = await made_group(api, topic, "g")
    _, first, _ = await api.call("POST", f"{group}/pull", {"max": 10, "consumer": "a"})
    old = {j["id"]: j["receipt"] for j in first["jobs"]}
    assert set(old) == {"x", "y", "z"}
    new = {i: j["receipt"] for i, j in (await pulled_again(api, group, "b", set(old))).items()}
    sent = [old["x"], new["y"], old["z"], new["z"]]
    status, body, _ = await api.call("POST", f"{group}/ack", {"receipts": sent})
    assert status == 200, body
    assert body["acked"] == 2
    assert body["results"] == [
        {"status": 409, "outcome": "stale"},
        {"status": 200, "outcome": "acked"},
        {"status": 409, "outcome": "stale"},
        {"status": 200, "outcome": "acked"},
    ]
    assert await pending_to(redis_async, topic, shards, "x") == [("http:b", 2)]
    states = {}
    for job_id in ("x", "y", "z"):
        _, info, _ = await api.call("GET", f"/v1/topics/{topic}/jobs/{job_id}")
        states[job_id] = info["state"]
    assert states == {"x": "running", "y": "succeeded", "z": "succeeded"}
    status, body, _ = await api.call(
        "POST", f"{group}/nack", {"receipts": [old["x"], new["x"]], "delay_ms": 60_000}
    )
    assert (status, body["retried"], [r["outcome"] for r in body["results"]]) == (
        200,
        1,
        ["stale", "retried"],
    )


async def blocked_clients(r: redis.asyncio.Redis) -> int:
    """Clients blocked in a command, over every node."""
    info = await r.info("clients")
    nodes = info.values() if all(isinstance(v, dict) for v in info.values()) else [info]
    return sum(int(node.get("blocked_clients", 0)) for node in nodes)


async def test_a_long_poll_returns_as_soon_as_a_job_fires(
    api: Served, topic: str, redis_async: redis.asyncio.Redis
) -> None:
    await api.call("POST", f"/v1/topics/{topic}/jobs", {"payload": 0, "delay_ms": 60_000})
    group = await made_group(api, topic, "g")
    empty = await api.call("POST", f"{group}/pull", {"max": 5, "wait_ms": 0})
    assert empty[:2] == (200, {"jobs": []})

    async def enqueue_soon() -> None:
        await api.call("POST", f"/v1/topics/{topic}/jobs", {"payload": 1, "id": "late"})

    pulling = asyncio.create_task(api.call("POST", f"{group}/pull", {"max": 5, "wait_ms": 10_000}))
    await eventually(lambda: blocked_clients(redis_async), timeout_s=10, what="a blocked pull")
    started = time.monotonic()
    await enqueue_soon()
    status, body, _ = await pulling
    assert status == 200 and [j["id"] for j in body["jobs"]] == ["late"]
    assert time.monotonic() - started < 5, "the pull waited out its wait_ms"


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("pull", {"max": 0}, "max"),
        ("pull", {"max": 1001}, "max"),
        ("pull", {"wait_ms": 30_001}, "wait_ms"),
        ("pull", {"consumer": "has space"}, "consumer"),
        ("ack", {"receipts": []}, "receipts"),
        ("ack", {"receipts": ["not-a-receipt"]}, "receipts[0]"),
        ("nack", {"receipts": ["eA"], "delay_ms": 1}, "receipts[0]"),
        ("nack", {"receipts": ["x"], "delay_ms": -1}, "delay_ms"),
    ],
)
async def test_bad_pull_input_names_the_field(
    api: Served, topic: str, path: str, body: dict[str, Any], field: str
) -> None:
    await api.call("POST", f"/v1/topics/{topic}/jobs", {"payload": 1})
    status, problem, _ = await api.call("POST", f"/v1/topics/{topic}/groups/g/{path}", body)
    assert (status, problem["field"]) == (422, field), problem


async def test_pulling_an_unknown_topic_is_404(api: Served) -> None:
    status, problem, _ = await api.call("POST", "/v1/topics/nothing-here/groups/g/pull", {})
    assert status == 404 and problem["field"] == "topic"


async def test_a_pull_hands_out_nothing_while_its_topic_or_group_is_paused(
    api: Served, topic: str
) -> None:
    """Bug: HTTP pulls ignored a pause of the topic and of their group (workers and the
    deliverer honour both): a paused pull handed jobs out as if nothing were paused."""
    jobs = f"/v1/topics/{topic}/jobs/batch"
    status, _, _ = await api.call("POST", jobs, {"jobs": [{"payload": i} for i in range(3)]})
    assert status == 200
    g = await made_group(api, topic, "g")
    h = await made_group(api, topic, "h")

    assert (await api.call("POST", f"/v1/topics/{topic}/pause"))[0] == 200
    for group in (g, h):
        for wait_ms in (0, 300):  # a long poll waits for a resume, then says it is paused
            status, body, _ = await api.call(
                "POST", f"{group}/pull", {"max": 10, "wait_ms": wait_ms}
            )
            assert (status, body) == (200, {"jobs": [], "paused": "topic"})
    assert (await api.call("POST", f"/v1/topics/{topic}/resume"))[0] == 200

    assert (await api.call("POST", f"/v1/topics/{topic}/pause?group=g"))[0] == 200
    status, body, _ = await api.call("POST", f"{g}/pull", {"max": 10})
    assert (status, body) == (200, {"jobs": [], "paused": "group"})
    status, body, _ = await api.call("POST", f"{h}/pull", {"max": 10})  # h is not paused
    assert status == 200 and sorted(j["payload"] for j in body["jobs"]) == [0, 1, 2]
    assert "paused" not in body

    # A long poll held while paused hands the jobs out once the group is resumed.
    pulling = asyncio.create_task(api.call("POST", f"{g}/pull", {"max": 10, "wait_ms": 20_000}))
    assert (await api.call("POST", f"/v1/topics/{topic}/resume?group=g"))[0] == 200
    status, body, _ = await pulling
    assert status == 200 and sorted(j["payload"] for j in body["jobs"]) == [0, 1, 2]
    assert "paused" not in body
