"""A worker in a process of its own, for fault injection (kill -9, SIGTERM).

Usage: python -m tests.support.worker_proc URL TOPIC CONSUMER BEHAVIOUR_JSON SETTINGS_JSON

The process runs ``Worker.from_url(URL, TOPIC, handler, consumer=CONSUMER, **SETTINGS)``
as the `wheelq worker` command does (`wheelq.cli.services.run_worker`), so SIGINT/SIGTERM
stop it gracefully. BEHAVIOUR picks what the
(async) handler does with each job:

    {"sleep_s": 0.5}        sleep this long per job (simulated work; default 0)
    {"poison": "poison"}    SIGKILL its own process when the payload equals this
    {"sync": true}          a sync handler (time.sleep in its thread) instead of an async one
    {"returns": "a"}        return {"by": "a", "attempt": ..., "deliveries": ...} (the job's
                            result) instead of None
    {"once_dsn": DSN}       apply the job's effect once: in one PostgreSQL transaction,
                            `wheelq.outbox.once` and, when it answers True, a row of
                            ``effects`` (job id); prints {"event": "once", "first": ...}

It logs to stderr (INFO) and prints one JSON line to stdout per handler start and finish, and
one when `run()` returns::

    {"event": "start", "job": "…", "attempt": 1, "deliveries": 1, "entry": "1700…-0",
     "shard": 2, "pid": 123}
    {"event": "finish", ...the same fields}
    {"event": "stopped", "finished": 2, "handed_on": 6, "abandoned": 0, "not_handed_on": 0,
     "unsettled": 0, "pid": 123}

`WorkerProcess` starts one from a test and reads those lines back.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from tests.support.child import ChildProcess, arm_crash_points
from wheelq import Job, Worker
from wheelq.cli.services import run_worker

_PRINTING = threading.Lock()  # sync handlers print from their threads: one line at a time


def _say(event: str, **fields: Any) -> None:
    line = json.dumps({"event": event, **fields, "pid": os.getpid()})
    with _PRINTING:
        print(line, flush=True)


def _handler(behaviour: dict[str, Any]) -> Any:
    sleep_s = float(behaviour.get("sleep_s", 0))
    poison = behaviour.get("poison")
    returns = behaviour.get("returns")

    def result(job: Job) -> Any:
        if returns is None:
            return None
        return {"by": returns, "attempt": job.attempt, "deliveries": job.deliveries}

    async def handle(job: Job) -> Any:
        line = {
            "job": job.id,
            "attempt": job.attempt,
            "deliveries": job.deliveries,
            "entry": job.entry_id,
            "shard": job.shard,
        }
        _say("start", **line)
        if poison is not None and job.payload == poison:
            os.kill(os.getpid(), signal.SIGKILL)
        if sleep_s:
            await asyncio.sleep(sleep_s)
        _say("finish", **line)
        return result(job)

    once_dsn = behaviour.get("once_dsn")
    if once_dsn is not None:
        return _once_handler(once_dsn, bool(behaviour.get("sync")))

    def handle_sync(job: Job) -> Any:
        line = {"job": job.id, "attempt": job.attempt, "entry": job.entry_id, "shard": job.shard}
        _say("start", **line)
        time.sleep(sleep_s)  # a sync handler that cannot be interrupted
        _say("finish", **line)
        return result(job)

    return handle_sync if behaviour.get("sync") else handle


def _once_handler(dsn: str, sync: bool) -> Any:
    import psycopg

    from wheelq import outbox

    effect = "INSERT INTO effects (job_id) VALUES (%s)"

    def handle_sync(job: Job) -> None:
        with psycopg.connect(dsn) as conn, conn.transaction():
            first = outbox.once(conn, job)
            if first:
                conn.execute(effect, (job.id,))
        _say("once", job=job.id, first=first, deliveries=job.deliveries)

    async def handle(job: Job) -> None:
        async with await psycopg.AsyncConnection.connect(dsn) as conn, conn.transaction():
            first = await outbox.aonce(conn, job)
            if first:
                await conn.execute(effect, (job.id,))
        _say("once", job=job.id, first=first, deliveries=job.deliveries)

    return handle_sync if sync else handle


def main() -> None:
    arm_crash_points()
    url, topic, consumer = sys.argv[1], sys.argv[2], sys.argv[3]
    behaviour, settings = json.loads(sys.argv[4]), json.loads(sys.argv[5])
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s"
    )
    worker = Worker.from_url(url, topic, _handler(behaviour), consumer=consumer, **settings)
    report = run_worker(worker)
    _say(
        "stopped",
        finished=report.finished,
        handed_on=report.handed_on,
        abandoned=report.abandoned,
        not_handed_on=report.not_handed_on,
        unsettled=report.unsettled,
    )


class WorkerProcess(ChildProcess):
    """One worker process; its stdout goes to ``OUT_DIR/CONSUMER.jsonl``, its log (stderr)
    to ``OUT_DIR/CONSUMER.log``. Always call `finish()` (it kills the process if alive)."""

    def __init__(
        self,
        url: str,
        topic: str,
        consumer: str,
        out_dir: Path,
        behaviour: dict[str, Any],
        settings: dict[str, Any],
        crash_at: str | None = None,
    ) -> None:
        self.consumer = consumer
        self.topic = topic
        args = [url, topic, consumer, json.dumps(behaviour), json.dumps(settings)]
        super().__init__("tests.support.worker_proc", args, consumer, out_dir, crash_at)

    def jobs(self, event: str) -> list[str]:
        """Job ids of the `event` ("start" / "finish") lines, in order, repeats kept."""
        return [line["job"] for line in self.lines() if line["event"] == event]

    def report(self) -> dict[str, Any] | None:
        """The "stopped" line, once `run()` returned."""
        return next((x for x in self.lines() if x["event"] == "stopped"), None)


if __name__ == "__main__":
    main()
