"""A worker in a process of its own, for fault injection (kill -9, SIGTERM).

Usage: python -m tests.support.worker_proc URL TOPIC CONSUMER BEHAVIOUR_JSON SETTINGS_JSON

The process runs ``Worker.from_url(URL, TOPIC, handler, consumer=CONSUMER,
**SETTINGS).run()``, so SIGINT/SIGTERM stop it gracefully. BEHAVIOUR picks what the
(async) handler does with each job:

    {"sleep_s": 0.5}        sleep this long per job (simulated work; default 0)
    {"poison": "poison"}    SIGKILL its own process when the payload equals this

It logs to stderr (INFO) and prints one JSON line to stdout per handler start and finish, and
one when `run()` returns::

    {"event": "start", "job": "…", "attempt": 1, "deliveries": 1, "entry": "1700…-0",
     "shard": 2, "pid": 123}
    {"event": "finish", ...the same fields}
    {"event": "stopped", "finished": 2, "handed_on": 6, "abandoned": 0, "pid": 123}

`WorkerProcess` starts one from a test and reads those lines back.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from wheelq import Job, Worker

ROOT = Path(__file__).resolve().parents[2]


def _say(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields, "pid": os.getpid()}), flush=True)


def _handler(behaviour: dict[str, Any]) -> Any:
    sleep_s = float(behaviour.get("sleep_s", 0))
    poison = behaviour.get("poison")

    async def handle(job: Job) -> None:
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

    return handle


def main() -> None:
    url, topic, consumer = sys.argv[1], sys.argv[2], sys.argv[3]
    behaviour, settings = json.loads(sys.argv[4]), json.loads(sys.argv[5])
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s"
    )
    worker = Worker.from_url(url, topic, _handler(behaviour), consumer=consumer, **settings)
    report = worker.run()
    _say(
        "stopped",
        finished=report.finished,
        handed_on=report.handed_on,
        abandoned=report.abandoned,
    )


class WorkerProcess:
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
    ) -> None:
        self.consumer = consumer
        self.out = out_dir / f"{consumer}.jsonl"
        self.log = out_dir / f"{consumer}.log"
        self._out = self.out.open("w")
        self._log = self.log.open("w")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.support.worker_proc",
                url,
                topic,
                consumer,
                json.dumps(behaviour),
                json.dumps(settings),
            ],
            cwd=ROOT,
            stdout=self._out,
            stderr=self._log,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: int) -> None:
        os.kill(self.proc.pid, sig)

    def lines(self) -> list[dict[str, Any]]:
        """Every complete line printed so far."""
        text = self.out.read_text()
        return [json.loads(line) for line in text.splitlines(keepends=True) if line.endswith("\n")]

    def jobs(self, event: str) -> list[str]:
        """Job ids of the `event` ("start" / "finish") lines, in order, repeats kept."""
        return [line["job"] for line in self.lines() if line["event"] == event]

    def report(self) -> dict[str, Any] | None:
        """The "stopped" line, once `run()` returned."""
        return next((x for x in self.lines() if x["event"] == "stopped"), None)

    def finish(self) -> None:
        """Kill the process if it still runs, reap it, close its files."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        self._out.close()
        self._log.close()

    def log_tail(self, chars: int = 3000) -> str:
        return self.log.read_text()[-chars:]


if __name__ == "__main__":
    main()
