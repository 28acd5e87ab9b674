"""A producer with a spool in a process of its own, for kill -9.

Usage: python -m tests.support.spool_proc URL TOPIC SPOOL_PATH COUNT
       python -m tests.support.spool_proc URL TOPIC SPOOL_PATH steady

Enqueues COUNT jobs one by one with ``Client.from_url(URL, spool=SPOOL_PATH)`` (every third
due now, the others in an hour) and prints one JSON line per returned id, flushed before the
next call: ``{"id": "01J…", "n": 7}``. A line printed is an id the client returned, so after
a kill -9 every printed id must be found in Redis once the spool is drained.

``steady`` is the chaos soak's producer (loadtest/benchlib/chaos_roles.py): batches of
`enqueue_many` at a steady pace, through the spool, with socket timeouts, until SIGTERM;
then it waits up to `DRAIN_S` for its spool to empty, closes the client and prints
``{"stopped": true, "spool_left": N}``. SIGUSR1 dumps every thread's stack to its log.
`SpoolProducer` starts either from a test.
"""

from __future__ import annotations

import faulthandler
import json
import signal
import sys
import time
from pathlib import Path

from tests.support.child import ChildProcess
from wheelq import Client
from wheelq.cli.signals import SignalFlag

MODULE = "tests.support.spool_proc"
RACE = "tests.support.signal_race"
DAY_S = 3600
TIMEOUTS = {"socket_timeout": 2, "socket_connect_timeout": 2}  # as the chaos soak's
STEADY_BATCH = 50  # jobs per enqueue_many in `steady`
DRAIN_S = 20.0  # how long `steady` waits for its spool to empty once told to stop


def steady(url: str, topic: str, path: str) -> None:
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    stop = SignalFlag(signal.SIGTERM)
    client = Client.from_url(url, spool=path, default_shards=4, redis_options=TIMEOUTS)
    print(json.dumps({"ready": True}), flush=True)
    n = 0
    while not stop.is_set():
        items = [{"payload": n + i, "delay": DAY_S} for i in range(STEADY_BATCH)]
        client.enqueue_many(topic, items)
        n += len(items)
        print(json.dumps({"enqueued": n, "spooled": client.spool_stats().depth}), flush=True)  # type: ignore[union-attr]
        stop.wait(0.01)
    deadline = time.monotonic() + DRAIN_S
    while client.spool_stats().depth and time.monotonic() < deadline:  # type: ignore[union-attr]
        time.sleep(0.05)
    left = client.spool_stats().depth  # type: ignore[union-attr]
    client.close()
    print(json.dumps({"stopped": True, "spool_left": left}), flush=True)


def main() -> None:
    url, topic, path = sys.argv[1], sys.argv[2], sys.argv[3]
    if sys.argv[4] == "steady":
        steady(url, topic, path)
        return
    count = int(sys.argv[4])
    client = Client.from_url(url, spool=path, default_shards=4)
    for n in range(count):
        job_id = client.enqueue(topic, {"n": n}, delay=0 if n % 3 == 0 else DAY_S)
        print(json.dumps({"id": job_id, "n": n}), flush=True)
    client.close()


class SpoolProducer(ChildProcess):
    """One producer process; its lines go to ``OUT_DIR/producer.jsonl``."""

    def __init__(
        self,
        url: str,
        topic: str,
        spool: Path,
        count: int | str,
        out_dir: Path,
        *,
        signal_race: bool = False,
    ) -> None:
        """`count` jobs, or ``"steady"`` (see the module); `signal_race`: run it under
        `tests.support.signal_race` (its SIGTERM handled inside its wait)."""
        args = [url, topic, str(spool), str(count)]
        if signal_race:
            super().__init__(RACE, [MODULE, *args], "producer", out_dir)
        else:
            super().__init__(MODULE, args, "producer", out_dir)

    def ids(self) -> list[str]:
        """Every id printed so far."""
        return [line["id"] for line in self.lines()]


if __name__ == "__main__":
    main()
