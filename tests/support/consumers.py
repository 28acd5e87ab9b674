"""Every kind of consumer a control feature must hold for, behind one interface, for the
every-face matrix (tests/integration/matrix/): a worker with an async handler, a worker
with a sync (``def``) handler, an HTTP pull consumer, and the callback deliverer.

Each records the job ids it ran (`handled`, repeats kept). The worker handlers share one
behaviour, `outcome`: a payload ``{"fail": n}`` raises on attempts 1..n; any other returns
``{"echo": payload}`` (the result the matrix reads back).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, ClassVar

import redis.asyncio

from tests.support.callback_server import Reply, ScriptedServer
from tests.support.web import Served
from tests.support.workers import Workers
from wheelq import Job, Worker
from wheelq.callbacks.deliverer import Deliverer
from wheelq.callbacks.delivery import GROUP as CALLBACK_GROUP
from wheelq.callbacks.delivery import delivery_worker
from wheelq.core.settings import CallbackSettings, WorkerSettings

FAST: dict[str, Any] = {
    "visibility_timeout_ms": 1000,
    "claim_interval_ms": 100,
    "shutdown_grace_ms": 1000,
    "retry_base_ms": 20,
    "retry_max_ms": 20,
    "retry_jitter_pct": 0,
}
"""Workers of the matrix react fast (the defaults are for production)."""


class Failed(Exception):
    """What a handler raises for a payload that asks it to fail."""


def outcome(job: Job) -> Any:
    """The matrix's handler behaviour (sync and async drivers below)."""
    fail = job.payload.get("fail") if isinstance(job.payload, dict) else None
    if fail is not None and job.attempt <= fail:
        raise Failed(f"asked to fail attempt {job.attempt} of {fail}")
    return {"echo": job.payload}


class Consumer:
    """One consumer of a topic's jobs in group `group`; `handled` lists each job id it ran
    (`ran`, or for the deliverer what its receiver got)."""

    kind: ClassVar[str]
    group: str

    def __init__(self) -> None:
        self.ran: list[str] = []

    @property
    def handled(self) -> list[str]:
        return self.ran

    def enqueue_options(self) -> dict[str, Any]:
        """What a job needs to reach this consumer (the deliverer: a callback URL)."""
        return {}

    async def start(self) -> None:
        raise NotImplementedError

    async def paused(self) -> bool:
        """Whether it knows its group is paused (a pull consumer: it got an answer saying so)."""
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError


class WorkerBacked(Consumer):
    """A consumer that is a `Worker` in this process: it knows its pause from the worker."""

    worker: Worker | None = None

    async def paused(self) -> bool:
        assert self.worker is not None
        return bool(self.worker.status()["paused"])

    async def stop(self) -> None:
        if self.worker is not None:
            await self.worker.stop(grace_ms=0)


class WorkerConsumer(WorkerBacked):
    """A `Worker` in this process, its handler a coroutine or a ``def`` (run on a thread)."""

    def __init__(self, pool: Workers, group: str, sync: bool, **settings: Any) -> None:
        super().__init__()
        self.pool, self.group, self.settings = pool, group, settings
        self.kind = "sync-worker" if sync else "async-worker"
        self.sync = sync
        self.worker: Worker | None = None

    def handler(self) -> Any:
        def handle_sync(job: Job) -> Any:
            self.ran.append(job.id)
            return outcome(job)

        async def handle(job: Job) -> Any:
            self.ran.append(job.id)
            return outcome(job)

        return handle_sync if self.sync else handle

    async def start(self) -> None:
        self.worker = await self.pool.start(self.handler(), group=self.group, **self.settings)


class PullConsumer(Consumer):
    """A consumer over HTTP only: pull (long-polling), ack what it got; `hold` keeps the
    next batch unacked for good, as a consumer that died holding it."""

    kind = "pull"

    def __init__(self, served: Served, topic: str, group: str) -> None:
        super().__init__()
        self.api, self.topic, self.group = served, topic, group
        self.path = f"/v1/topics/{topic}/groups/{group}"
        self.nack = False
        """Nack (with no delay) instead of ack."""
        self.hold = False
        self.held: list[str] = []
        self.answers: list[dict[str, Any]] = []
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        status, body, _ = await self.api.call(
            "POST", f"/v1/topics/{self.topic}/groups", {"name": self.group}
        )
        assert status in (201, 200), body
        self._task = asyncio.create_task(self._run())

    async def pull_once(self, wait_ms: int = 100) -> list[dict[str, Any]]:
        body = {"max": 100, "wait_ms": wait_ms, "consumer": "matrix"}
        status, answer, _ = await self.api.call("POST", f"{self.path}/pull", body)
        assert status == 200, answer
        self.answers.append(answer)
        jobs: list[dict[str, Any]] = answer["jobs"]
        return jobs

    async def _run(self) -> None:
        while True:
            jobs = await self.pull_once()
            if not jobs:
                continue
            if self.hold:
                self.held += [j["id"] for j in jobs]
                self.hold = False
                continue
            self.ran += [j["id"] for j in jobs]
            receipts = {"receipts": [j["receipt"] for j in jobs]}
            if self.nack:
                receipts["delay_ms"] = 0  # type: ignore[assignment]
            verb = "nack" if self.nack else "ack"
            status, body, _ = await self.api.call("POST", f"{self.path}/{verb}", receipts)
            assert status == 200, body

    async def paused(self) -> bool:
        return any(a.get("paused") for a in self.answers[-3:])

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            if not self._task.cancelled() and self._task.exception() is not None:
                raise self._task.exception()  # type: ignore[misc]


class CallbackConsumer(WorkerBacked):
    """The callback deliverer (its worker, group ``callbacks``) posting to a local receiver
    that answers 200 "delivered"; `handled` is what the receiver got."""

    kind = "callbacks"
    group = CALLBACK_GROUP

    def __init__(self, r: redis.asyncio.Redis, topic: str, receiver: ScriptedServer) -> None:
        super().__init__()
        self.r, self.topic, self.receiver = r, topic, receiver
        self.receiver.scripts["/matrix"] = lambda n: Reply(200, body="delivered")
        self.deliverer: Deliverer | None = None

    @property
    def handled(self) -> list[str]:
        """The ids of the callbacks the receiver answered 2xx."""
        return [h.job_id for h in self.receiver.to("/matrix") if 200 <= h.status < 300]

    def enqueue_options(self) -> dict[str, Any]:
        return {"callback": self.receiver.url("/matrix")}

    async def start(self) -> None:
        self.deliverer = Deliverer(CallbackSettings(), signing_secret="s", allow_private=True)
        self.worker = delivery_worker(self.r, self.topic, self.deliverer, WorkerSettings(**FAST))
        await self.worker.start()

    async def stop(self) -> None:
        await super().stop()
        if self.deliverer is not None:
            await self.deliverer.aclose()


def make(
    kind: str,
    pool: Workers,
    r: redis.asyncio.Redis,
    topic: str,
    receiver: ScriptedServer,
    served: Served | None = None,
) -> Consumer:
    """A consumer of `kind` ("async-worker", "sync-worker", "callbacks", "pull") in group
    "default" (the deliverer: "callbacks"; pull: "pull", through `served`)."""
    if kind == "callbacks":
        return CallbackConsumer(r, topic, receiver)
    if kind == "pull":
        assert served is not None, "a pull consumer needs the served app"
        return PullConsumer(served, topic, "pull")
    assert kind in ("async-worker", "sync-worker"), kind
    return WorkerConsumer(pool, "default", sync=kind == "sync-worker")
