"""Callback delivery against a local HTTP server scripted to fail: 500s, timeouts, 429 with
Retry-After, 410, connection refused, a slow host beside a healthy one, an endpoint down
long enough to open the breaker. Every job ends delivered exactly once after its retries,
or dead-lettered with the reason; every request's signature verifies."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

import pytest
import redis.asyncio
from prometheus_client.parser import text_string_to_metric_families

from tests.integration import test_worker
from tests.integration.test_web_dashboard import get
from tests.integration.test_worker import FAST
from tests.support.callback_server import Reply, ScriptedServer, free_port
from tests.support.cli import run_wheelq
from tests.support.clients import admin_of
from tests.support.servers import dedicated_server
from tests.support.waiting import eventually, until
from tests.support.web import serving
from wheelq import AsyncAdmin, AsyncClient, JobRef, JobState, Scheduler, Worker
from wheelq.callbacks import verify
from wheelq.callbacks.deliverer import Deliverer
from wheelq.callbacks.delivery import GROUP, Deliveries, delivery_worker
from wheelq.core.keys import ShardKeys
from wheelq.core.settings import CallbackSettings, WorkerSettings
from wheelq.embedded import ServerBinary
from wheelq.runtime.clock import wall_ms

scheduler = test_worker.scheduler

SECRET = "s3cret"
RETRY_FAST = {**FAST, "retry_base_ms": 20, "retry_max_ms": 20, "retry_jitter_pct": 0}


Script = Callable[[int], Reply]


class Delivery:
    """The test's topic, its client and receiver, and a deliverer worker `start` starts on
    it (stopped at teardown); `route`, `enqueue` and `settled` build the rest."""

    def __init__(
        self, r: redis.asyncio.Redis, topic: str, client: AsyncClient, receiver: ScriptedServer
    ) -> None:
        self.r, self.topic, self.client, self.receiver = r, topic, client, receiver
        self.deliverer: Deliverer | None = None
        self.worker: Worker | None = None

    async def start(self, *, allow_private: bool = True, **settings: Any) -> Deliverer:
        """A deliverer of `settings` (`CallbackSettings`), signing with `SECRET` when it may
        reach private targets (the receiver's)."""
        secret = SECRET if allow_private else ""
        self.deliverer = Deliverer(
            CallbackSettings(**settings), signing_secret=secret, allow_private=allow_private
        )
        self.worker = delivery_worker(
            self.r, self.topic, self.deliverer, WorkerSettings(**RETRY_FAST)
        )
        await self.worker.start()
        return self.deliverer

    def route(self, path: str, script: Script, **url: str) -> str:
        """Script the receiver's `path`; returns its URL."""
        self.receiver.scripts[path] = script
        return self.receiver.url(path, **url)

    async def enqueue(self, url: str, payloads: Iterable[Any], **options: Any) -> list[str]:
        """One job a payload, in order, each with the callback `url`."""
        return [await self.client.enqueue(self.topic, p, callback=url, **options) for p in payloads]

    async def settled(self, ids: list[str]) -> dict[str, Any]:
        return await settled(self.client, self.topic, ids)

    async def stop(self) -> None:
        if self.worker is not None:
            await self.worker.stop()
        if self.deliverer is not None:
            await self.deliverer.aclose()


@pytest.fixture
async def delivery(
    redis_async: redis.asyncio.Redis,
    topic: str,
    client: AsyncClient,
    scheduler: Scheduler,
    receiver: ScriptedServer,
) -> AsyncIterator[Delivery]:
    """A `Delivery` with a scheduler node running on the topic."""
    d = Delivery(redis_async, topic, client, receiver)
    yield d
    await d.stop()


async def settled(client: AsyncClient, topic: str, ids: list[str]) -> dict[str, Any]:
    """Wait until every job has succeeded or died; returns each one's JobInfo."""

    async def check() -> dict[str, Any] | None:
        infos = {i: await client.get(topic, i) for i in ids}
        done = all(
            info.groups and info.groups[0].state in (JobState.SUCCEEDED, JobState.DEAD)
            for info in infos.values()
        )
        return infos if done else None

    return await eventually(check, timeout_s=30, what="every job delivered or dead")


def assert_signed(server: ScriptedServer) -> None:
    for hit in server.hits:
        header = hit.headers["Wheelq-Signature"]
        assert verify(SECRET, header, hit.body, wall_ms()), f"bad signature on {hit}"
        assert not verify(SECRET, header, hit.body + b" ", wall_ms())


async def test_a_job_is_posted_once_when_due_with_its_payload_headers_and_signature(
    delivery: Delivery, receiver: ScriptedServer, topic: str
) -> None:
    url = delivery.route("/hook", lambda n: Reply(204))
    await delivery.start()
    callback = {"url": url, "headers": {"X-Tenant": "acme"}}
    due_at = time.time() + 0.3
    job_id = await delivery.client.enqueue(topic, {"a": [1, "x"]}, at=due_at, callback=callback)
    await delivery.settled([job_id])

    (hit,) = receiver.hits
    assert hit.json == {
        "id": job_id,
        "topic": topic,
        "payload": {"a": [1, "x"]},
        "due_ms": hit.json["due_ms"],
        "attempt": 1,
        "priority": 5,
        "key": None,
    }
    assert hit.json["due_ms"] == pytest.approx(due_at * 1000, abs=1)
    assert hit.headers["X-Tenant"] == "acme"
    assert hit.headers["Content-Type"] == "application/json"
    assert (hit.headers["Wheelq-Id"], hit.headers["Wheelq-Attempt"]) == (job_id, "1")
    assert_signed(receiver)


async def test_a_callback_jobs_result_is_the_receivers_status_and_the_start_of_its_answer(
    delivery: Delivery, topic: str
) -> None:
    answer = "é" * 600 + "tail"  # 1,204 bytes of UTF-8: cut at 1 KiB
    url = delivery.route("/hook", lambda n: Reply(201, body=answer))
    await delivery.start()
    (job_id,) = await delivery.enqueue(url, [1])

    got = await delivery.client.result(topic, job_id, group="callbacks", timeout=20)
    assert got == {"status": 201, "body": "é" * 512}


async def test_a_job_follows_a_callback_jobs_delivery_or_its_dead_letter(
    delivery: Delivery, topic: str
) -> None:
    # A callback job is settled by the deliverer's group: a job following it names that
    # group, and is released by a delivery, cancelled by a dead letter (410: at once).
    ok = delivery.route("/ok", lambda n: Reply(204))
    gone = delivery.route("/gone", lambda n: Reply(410))
    await delivery.start()
    delivered, dead = await delivery.enqueue(ok, [1]) + await delivery.enqueue(gone, [2])
    after_ok = await delivery.client.enqueue(topic, "a", after=JobRef(topic, delivered, GROUP))
    after_dead = await delivery.client.enqueue(topic, "b", after=JobRef(topic, dead, GROUP))

    async def both() -> bool:
        a = await delivery.client.get(topic, after_ok)
        b = await delivery.client.get(topic, after_dead)
        return (a.state, b.state) == (JobState.READY, JobState.CANCELLED)

    await eventually(both, timeout_s=20, what="one released, one cancelled")


async def test_500s_and_timeouts_are_retried_until_delivered_once(
    delivery: Delivery, receiver: ScriptedServer, topic: str
) -> None:
    flaky_url = delivery.route("/flaky", lambda n: Reply(500 if n % 3 else 200, body="oops"))
    slow_url = delivery.route("/slow-once", lambda n: Reply(200, delay_s=1.0 if n == 1 else 0))
    await delivery.start(breaker_failures=1000)
    flaky = await delivery.enqueue(flaky_url, range(4), max_attempts=10)
    slow = await delivery.client.enqueue(topic, "s", callback={"url": slow_url, "timeout_ms": 200})
    infos = await delivery.settled([*flaky, slow])

    assert all(i.groups[0].state is JobState.SUCCEEDED for i in infos.values())
    assert receiver.delivered() == dict.fromkeys([*flaky, slow], 1)
    assert [h.attempt for h in receiver.to("/slow-once")] == [1, 2]
    flaky_attempts = sorted(h.attempt for h in receiver.to("/flaky"))
    assert len(flaky_attempts) == 12, "each flaky job failed twice, then succeeded"
    assert_signed(receiver)


async def test_429_waits_for_retry_after(delivery: Delivery, receiver: ScriptedServer) -> None:
    url = delivery.route(
        "/limited", lambda n: Reply(429, headers={"Retry-After": "1"}) if n == 1 else Reply(200)
    )
    await delivery.start()
    await delivery.settled(await delivery.enqueue(url, [1]))

    first, second = receiver.to("/limited")
    assert (first.status, second.status) == (429, 200)
    # The backoff alone would have retried after 20 ms.
    assert second.at_s - first.at_s >= 1.0


async def test_410_and_redirects_are_dead_lettered_at_once_with_the_answer(
    delivery: Delivery, receiver: ScriptedServer, topic: str
) -> None:
    gone_url = delivery.route("/gone", lambda n: Reply(410, body="subscription removed"))
    moved_url = delivery.route("/moved", lambda n: Reply(301, headers={"Location": "http://x/"}))
    await delivery.start()
    (gone,) = await delivery.enqueue(gone_url, [1], max_attempts=5)
    (moved,) = await delivery.enqueue(moved_url, [2], max_attempts=5)
    infos = await delivery.settled([gone, moved])
    client = delivery.client
    admin = admin_of(client)

    assert [h.attempt for h in receiver.to("/gone")] == [1]
    assert [h.attempt for h in receiver.to("/moved")] == [1]
    letters = {d.job_id: d for d in await admin.dead_letters(topic)}
    assert "HTTP 410: subscription removed" in letters[gone].error
    assert "not retried" in letters[gone].error
    assert "HTTP 301" in letters[moved].error
    assert infos[gone].groups[0].state is JobState.DEAD


async def test_a_5xx_dead_letter_says_the_answer_without_a_class_path(
    delivery: Delivery, topic: str
) -> None:
    url = delivery.route("/down", lambda n: Reply(503, body="down for maintenance"))
    await delivery.start()
    await delivery.settled(await delivery.enqueue(url, [1], max_attempts=1))
    (letter,) = await AsyncAdmin.of(delivery.client).dead_letters(topic)
    # was "attempt 1 of 1: wheelq.callbacks.deliverer._BreakerFailure: http://...", cut
    # off on the dashboard before the answer
    assert letter.error == f"attempt 1 of 1: {url} answered HTTP 503: down for maintenance"


async def test_connection_refused_is_retried_then_dead_lettered_with_the_reason(
    delivery: Delivery, topic: str
) -> None:
    await delivery.start(breaker_failures=1000)
    url = f"http://127.0.0.1:{free_port()}/nobody"
    (job_id,) = await delivery.enqueue(url, [1], max_attempts=3)
    infos = await delivery.settled([job_id])

    assert infos[job_id].groups[0].state is JobState.DEAD
    (letter,) = await AsyncAdmin.of(delivery.client).dead_letters(topic)
    assert letter.attempt == 3
    assert "attempt 3 of 3" in letter.error and "cannot connect" in letter.error


async def test_a_slow_host_does_not_hold_up_a_healthy_one(
    delivery: Delivery, receiver: ScriptedServer, topic: str
) -> None:
    healthy = ScriptedServer()
    await healthy.start()
    try:
        slow_url = delivery.route("/slow", lambda n: Reply(200, delay_s=0.5))
        healthy.scripts["/fast"] = lambda n: Reply(200)
        # 16 slots in all, 2 per host: without the per-host cap the slow host's jobs,
        # enqueued first, would take every slot for 4 s.
        await delivery.start(concurrency=16, per_host_concurrency=2)
        slow = await delivery.enqueue(slow_url, range(16), max_attempts=1)
        fast = await delivery.enqueue(healthy.url("/fast"), range(40), max_attempts=1)
        await until(lambda: len(healthy.delivered()) == 40, timeout_s=20, what="the fast jobs")
        assert len(receiver.delivered()) < 16, "the healthy host waited for the slow one"
        await delivery.settled([*slow, *fast])
        assert receiver.delivered() == dict.fromkeys(slow, 1)
        assert healthy.delivered() == dict.fromkeys(fast, 1)
        assert await AsyncAdmin.of(delivery.client).dead_letters(topic) == [], (
            "a deferral counted as an attempt"
        )
    finally:
        await healthy.stop()


async def test_the_breaker_opens_on_failures_and_closes_on_a_good_probe(
    delivery: Delivery, receiver: ScriptedServer
) -> None:
    up = False
    url = delivery.route("/down", lambda n: Reply(200) if up else Reply(503, body="down"))
    deliverer = await delivery.start(
        per_host_concurrency=1, breaker_failures=3, breaker_open_ms=400
    )
    ids = await delivery.enqueue(url, range(10), max_attempts=50)
    origin = f"http://127.0.0.1:{receiver.port}"
    await until(lambda: deliverer.gate.refused_open > 0, timeout_s=10, what="the breaker open")
    opened = time.monotonic()
    assert len(receiver.hits) == 3, "requests went out past the breaker's threshold"
    # While it stays down, only one probe per open period reaches it.
    await until(lambda: len(receiver.hits) >= 5, timeout_s=10, what="two probes")
    down_s = time.monotonic() - opened
    assert len(receiver.hits) <= 3 + down_s / 0.4 + 1
    up = True
    infos = await delivery.settled(ids)

    assert deliverer.gate.hosts[origin].open_until_ms == 0, "the breaker did not close"
    assert all(i.groups[0].state is JobState.SUCCEEDED for i in infos.values())
    assert receiver.delivered() == dict.fromkeys(ids, 1)


async def test_private_targets_are_refused_unless_allowed(
    delivery: Delivery, receiver: ScriptedServer, topic: str
) -> None:
    await delivery.start(allow_private=False)
    (by_ip,) = await delivery.enqueue(delivery.route("/internal", lambda n: Reply(200)), [1])
    (by_name,) = await delivery.enqueue(receiver.url("/internal", host="localhost"), [2])
    await delivery.settled([by_ip, by_name])
    assert receiver.hits == []
    letters = {d.job_id: d.error for d in await AsyncAdmin.of(delivery.client).dead_letters(topic)}
    assert "private address" in letters[by_ip]
    assert "private addresses" in letters[by_name] or "private address" in letters[by_name]


async def test_serve_delivers_a_new_topics_callbacks_without_waiting_for_the_registry_check(
    server_binary: ServerBinary, receiver: ScriptedServer, topic: str
) -> None:
    """The registry is checked once an hour here: only the enqueue itself can have started
    the topic's delivery worker. A server of its own: delivering every topic of the shared
    one would start a worker for each topic the suite has made."""
    receiver.scripts["/new"] = lambda n: Reply(200)

    def deliveries(client: Any) -> Deliveries:
        deliverer = Deliverer(CallbackSettings(), allow_private=True)
        return Deliveries(
            client.executor, deliverer, WorkerSettings(**RETRY_FAST), refresh_ms=3_600_000
        )

    with dedicated_server(server_binary) as server:
        await _deliver_new_topic(server.url, deliveries, receiver, topic)


async def _deliver_new_topic(
    redis_url: str, deliveries: Any, receiver: ScriptedServer, topic: str
) -> None:
    async with serving(redis_url, deliveries=deliveries, allow_private=True) as api:
        body = {"payload": 1, "callback": {"url": receiver.url("/new")}}
        status, made, _ = await api.call("POST", f"/v1/topics/{topic}/jobs", body)
        assert status == 201
        await until(lambda: receiver.delivered() == {made["id"]: 1}, timeout_s=20, what="it")
        # The delivery worker's parts and the service's own share one family, each once.
        _, text, _ = await api.call("GET", "/metrics")
        (family,) = [f for f in text_string_to_metric_families(text) if f.name == "wheelq_part_up"]
        parts = [(s.labels["role"], s.labels["part"]) for s in family.samples]
        assert len(parts) == len(set(parts))
        assert {("serve", "clock"), ("serve", "sampler"), ("worker", "reader")} <= set(parts)


async def test_callback_jobs_waiting_show_in_the_stats_of_every_face(
    delivery: Delivery, redis_url: str
) -> None:
    """Issue 43: with the topic paused and 3 callback jobs fired and waiting, the stats of
    every face said pending, ready and in stream 0 (only PAUSED said all): the callbacks
    stream's backlog now counts as ready and in stream, as a consumer group's does."""
    topic, client = delivery.topic, delivery.client
    await admin_of(client).pause(topic)  # first: a deliverer reads nothing of a paused topic
    await delivery.start()
    url = delivery.route("/hook", lambda n: Reply(200))
    await delivery.enqueue(url, [1, 2, 3])
    shards = (await admin_of(client).topics())[topic]
    streams = [ShardKeys(topic, shard).callbacks for shard in range(shards)]

    async def fired() -> bool:
        return sum([await delivery.r.xlen(s) for s in streams]) == 3

    await eventually(fired, timeout_s=20, what="the 3 callback jobs fired")
    stats = await admin_of(client).stats(topic)
    assert stats is not None, topic
    assert (stats.pending, stats.ready + stats.in_flight, stats.in_stream) == (0, 3, 3), stats
    (row,) = [
        line.split()
        for line in run_wheelq("topics", "--redis-url", redis_url).stdout.splitlines()
        if line.split()[:1] == [topic]
    ]
    pending, ready, in_flight, in_stream = map(int, row[2:6])
    assert (pending, ready + in_flight, in_stream, row[-1]) == (0, 3, 3, "all"), row
    async with serving(redis_url) as api:
        status, body, _ = await api.call("GET", f"/v1/topics/{topic}")
        assert (status, body["ready"] + body["in_flight"], body["in_stream"]) == (200, 3, 3), body
        ids = (await get(api, f"/ui/topics/{topic}"))[1].ids
        shown = int(ids["total-ready"]) + int(ids["total-in-flight"])
        assert (shown, ids["total-in-stream"]) == (3, "3"), ids
