"""Firing accuracy on its own: N jobs due at a steady rate, fired by a real scheduler node
(and, with --workers, handled by worker processes).

    python loadtest/fire_accuracy.py --rate 20000 --duration 10
    python loadtest/fire_accuracy.py --rate 5000 --duration 10 --workers 1

The `accuracy` scenario of `bench.py` (`benchlib/accuracy.py`) for one rate, with its
knobs on the command line: it starts a Valkey server (or uses --redis-url), a scheduler
node in a process of its own, enqueues rate x duration jobs due evenly over `duration`
seconds, waits until all have fired (and been handled), and prints one JSON object. It
is a benchmark, not a test: it exits 1 only if a job is missing, duplicated, early, or
(with workers) not handled.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchlib.accuracy import run_accuracy
from benchlib.common import Bench

from wheelq.testing import EmbeddedServer, find_server_binaries


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rate", type=float, default=20_000, help="due jobs per second")
    p.add_argument("--duration", type=float, default=10.0, help="seconds the due times span")
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--workers", type=int, default=0, help="worker processes (0: fire only)")
    p.add_argument("--concurrency", type=int, default=200, help="handlers at once per worker")
    p.add_argument("--payload-bytes", type=int, default=100)
    p.add_argument("--config", help="TOML settings file for the scheduler node")
    p.add_argument("--redis-url", help="use this server instead of an embedded one")
    p.add_argument("--server", choices=["valkey", "redis"], default="valkey")
    args = p.parse_args()
    server = None
    url = args.redis_url
    if url is None:
        binary = next((b for b in find_server_binaries() if b.kind == args.server), None)
        if binary is None:
            p.error(f"no {args.server} server binary found")
        server = EmbeddedServer(binary)
        server.start()
        url = server.url
    bench = Bench(url)
    try:
        result = run_accuracy(
            bench,
            rate=args.rate,
            duration_s=args.duration,
            shards=args.shards,
            workers=args.workers,
            concurrency=args.concurrency,
            payload_bytes=args.payload_bytes,
            scheduler_config=args.config,
        )
        info = bench.redis().info("server")
    finally:
        bench.close()
        if server is not None:
            server.stop()
    result = {
        "scenario": "fire_accuracy",
        "server": f"{info.get('server_name', 'redis')} "
        f"{info.get('valkey_version') or info.get('redis_version')}",
        **result,
    }
    print(json.dumps(result, indent=2))
    ok = result["missing"] == 0 and result["duplicates"] == 0 and result["early"] == 0
    if "handled" in result:
        ok = ok and result["handled"]["missing"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
