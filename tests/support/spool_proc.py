"""A producer with a spool in a process of its own, for kill -9.

Usage: python -m tests.support.spool_proc URL TOPIC SPOOL_PATH COUNT

Enqueues COUNT jobs one by one with ``Client.from_url(URL, spool=SPOOL_PATH)`` (every third
due now, the others in an hour) and prints one JSON line per returned id, flushed before the
next call: ``{"id": "01J…", "n": 7}``. A line printed is an id the client returned, so after
a kill -9 every printed id must be found in Redis once the spool is drained.
`SpoolProducer` starts one from a test.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.support.child import ChildProcess
from wheelq import Client

DAY_S = 3600


def main() -> None:
    url, topic, path, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    client = Client.from_url(url, spool=path, default_shards=4)
    for n in range(count):
        job_id = client.enqueue(topic, {"n": n}, delay=0 if n % 3 == 0 else DAY_S)
        print(json.dumps({"id": job_id, "n": n}), flush=True)
    client.close()


class SpoolProducer(ChildProcess):
    """One producer process; its lines go to ``OUT_DIR/producer.jsonl``."""

    def __init__(self, url: str, topic: str, spool: Path, count: int, out_dir: Path) -> None:
        args = [url, topic, str(spool), str(count)]
        super().__init__("tests.support.spool_proc", args, "producer", out_dir)

    def ids(self) -> list[str]:
        """Every id printed so far."""
        return [line["id"] for line in self.lines()]


if __name__ == "__main__":
    main()
