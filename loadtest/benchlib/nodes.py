"""wheelq processes for the bench: scheduler nodes (`wheelq scheduler`) and worker processes
that record when each handler started.

A worker process (this file run as a script) runs `wheelq.Worker` with a handler that
appends (job id, due ms, start ms) to memory, the start read on a clock corrected to the
Redis server's (`RedisClock`, min-RTT offset): a no-op ``async def`` (with `handler_ms`, one
that then sleeps that long), or (``sync``) a plain ``def`` that also appends a line to a
file, one ``os.write`` on an ``O_APPEND`` descriptor, as the peers' handlers do
(`benchlib.peer_tasks`). On SIGTERM it stops the worker and
writes the records to a JSON file.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

if __package__ in (None, ""):  # run as a script: make `benchlib` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchlib.common import Bench, wheelq_cmd


def start_scheduler(
    bench: Bench, topic: str, *settings: str, config: str | None = None
) -> subprocess.Popen[bytes]:
    """A scheduler node for `topic`; `settings` are TOML lines for its [scheduler] section,
    or `config` a TOML file of its own."""
    args = ["scheduler", "--redis-url", bench.url, "--topics", topic]
    if config:
        args += ["--config", config]
    elif settings:
        fd, path = tempfile.mkstemp(suffix=".toml", prefix="bench-")
        with os.fdopen(fd, "w") as f:
            f.write("[scheduler]\n" + "\n".join(settings) + "\n")
        args += ["--config", path]
    return bench.spawn(wheelq_cmd(*args))


def workers_for(rate: float) -> int:
    """Worker processes for `rate` jobs/s: one per ~20k jobs/s (a process handles ~35k
    no-op jobs/s)."""
    return 1 if rate <= 20_000 else 2


@dataclass
class Workers:
    """Worker processes recording handler starts; `records()` after `stop()`."""

    bench: Bench
    topic: str
    count: int = 1
    concurrency: int = 200
    sync: bool = False
    """A sync handler (threads) instead of an async one."""
    handler_ms: float = 0.0
    """What an async handler takes after it records its start (an ``asyncio.sleep``)."""
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    tmp: str = field(default_factory=lambda: tempfile.mkdtemp(prefix="bench-workers-"))

    def start(self) -> Workers:
        for i in range(self.count):
            out = os.path.join(self.tmp, f"worker-{i}.json")
            cmd = [sys.executable, os.path.abspath(__file__), self.bench.url, self.topic, out]
            kind = "sync" if self.sync else "async"
            cmd += [str(self.concurrency), kind, str(self.handler_ms)]
            self.procs.append(self.bench.spawn(cmd, stdout=subprocess.PIPE))
        for proc in self.procs:
            assert proc.stdout is not None
            proc.stdout.readline()  # "ready": clock synced, group joined
        return self

    def stop(self) -> None:
        for proc in self.procs:
            self.bench.stop(proc, timeout_s=60)

    def records(self) -> list[tuple[str, int, float]]:
        """(job id, due ms, handler start ms) of every handler run."""
        out: list[tuple[str, int, float]] = []
        for i in range(self.count):
            with open(os.path.join(self.tmp, f"worker-{i}.json")) as f:
                out += [(job_id, due, start) for job_id, due, start in json.load(f)]
        return out


async def _worker_main(
    url: str, topic: str, out: str, concurrency: int, sync: bool, handler_ms: float
) -> None:
    import redis.asyncio

    from wheelq import Job, Worker
    from wheelq.runtime.clock import RedisClock
    from wheelq.scheduler.scheduler import ClockKeeper
    from wheelq.store.executor import AsyncExecutor

    connection = redis.asyncio.Redis.from_url(url)
    clock = RedisClock()
    keeper = ClockKeeper(AsyncExecutor(connection), clock, 5000)
    for _ in range(5):
        await keeper.sample()
    records: list[tuple[str, int, float]] = []

    async def handler(job: Job) -> None:
        records.append((job.id, job.due_ms, clock.now_ms_float()))
        if handler_ms:
            await asyncio.sleep(handler_ms / 1000)

    lines = os.open(out + ".lines", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def sync_handler(job: Job) -> None:
        start = clock.now_ms_float()
        records.append((job.id, job.due_ms, start))
        os.write(lines, f"{job.id} {job.due_ms} {start:.3f}\n".encode())

    chosen = sync_handler if sync else handler
    worker = Worker.from_url(url, topic, chosen, concurrency=concurrency)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await keeper.start()
    await worker.start()
    try:  # as the `wheelq` commands do once started
        from wheelq.cli.signals import settle_heap as settle
    except ImportError:  # a revision before it (run with PYTHONPATH at its checkout)
        settle = gc.freeze
    settle()
    print("ready", flush=True)
    await stop.wait()
    await worker.stop()
    await keeper.stop()
    await connection.aclose()
    os.close(lines)
    with open(out, "w") as f:
        json.dump(records, f)


if __name__ == "__main__":
    a = sys.argv
    handler_ms = float(a[6]) if len(a) > 6 else 0.0
    asyncio.run(_worker_main(a[1], a[2], a[3], int(a[4]), a[5] == "sync", handler_ms))
