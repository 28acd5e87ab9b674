"""`wheelq scheduler` and `wheelq worker`: the long-running roles, in the foreground."""

from __future__ import annotations

import argparse
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, cast

from wheelq.cli.config import split_topics
from wheelq.cli.context import Context
from wheelq.cli.errors import usage_error
from wheelq.cli.handler_spec import load_handler
from wheelq.cli.signals import exit_now, run_until_signal

if TYPE_CHECKING:
    from wheelq.metrics import MetricsServer
    from wheelq.worker.worker import Worker, WorkerStopReport

log = logging.getLogger(__name__)


def register(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Add the ``scheduler`` and ``worker`` commands."""
    p = sub.add_parser(
        "scheduler", parents=parents, help="run a scheduler node until SIGINT/SIGTERM"
    )
    p.add_argument(
        "--topics", help="comma-separated topics to serve (default: all, incl. new ones)"
    )
    _metrics_flag(p)
    p.set_defaults(func=scheduler)

    p = sub.add_parser(
        "worker", parents=parents, help="run a handler on a topic's jobs until SIGINT/SIGTERM"
    )
    p.add_argument("handler", help="module:function, a def or async def taking a wheelq.Job")
    p.add_argument("--topic", required=True)
    p.add_argument("--group", help="consumer group (default: [worker] group, else 'default')")
    p.add_argument("--concurrency", type=int, help="handlers at once (default 10)")
    p.add_argument(
        "--from",
        dest="start",
        choices=["earliest", "now"],
        help="where a new group starts: every entry still in the stream (earliest, the "
        "default) or only jobs fired from now on",
    )
    _metrics_flag(p)
    p.set_defaults(func=worker)


def _metrics_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--metrics-port",
        type=int,
        help="serve Prometheus metrics on http://HOST:PORT/metrics (default 0: off)",
    )
    p.add_argument(
        "--metrics-host",
        help="address or host name the metrics listen on (default 0.0.0.0, every IPv4 "
        "interface, for a Prometheus on another host; 127.0.0.1: this machine only)",
    )


def metrics_beside(node: Any, section: str, port: object, host: object) -> Any:
    """What `run_until_signal` runs beside `node`: a `MetricsServer` on the section's
    ``metrics_port`` and ``metrics_host``, or None for port 0 or unset. It logs the address
    it bound, and says so when that is every interface.

    Raises:
        InvalidArgumentError: (exit 2) A port not in [0, 65535].
        CliError: (exit 2) A host that is not a non-empty string.
    """
    from wheelq.cli.config import CLI_RANGES

    port = port or 0
    CLI_RANGES["metrics_port"].check(f"[{section}] metrics_port", port)
    if not port:
        return None
    if host is not None and not (isinstance(host, str) and host.strip("[] ")):
        raise usage_error(f"[{section}] metrics_host must be an address or host name, got {host!r}")
    from wheelq.metrics import MetricsServer
    from wheelq.metrics.server import EVERY_INTERFACE

    @asynccontextmanager
    async def serving() -> AsyncIterator[MetricsServer]:
        async with MetricsServer(
            node, port=cast(int, port), host=host or EVERY_INTERFACE
        ) as server:
            where = " (every interface; --metrics-host narrows it)" * server.every_interface
            log.info("serving metrics on %s%s", server.url, where)
            yield server

    return serving


def scheduler(ctx: Context) -> int:
    """Run a node on the topics of ``--topics``, ``$WHEELQ_SCHEDULER_TOPICS`` or
    ``[scheduler] topics`` (default: every topic), with the ``[scheduler]`` settings."""
    from wheelq.scheduler.scheduler import Scheduler

    url = ctx.redis_url()
    flag = None if ctx.args.topics is None else split_topics(ctx.args.topics, "--topics")
    settings = ctx.section(
        "scheduler",
        topics=flag,
        metrics_port=ctx.args.metrics_port,
        metrics_host=ctx.args.metrics_host,
    )
    topics = settings.pop("topics", None)
    if topics is not None:  # from the file unless checked already (the flag, the environment)
        topics = split_topics(topics, "[scheduler] topics")
    port, host = settings.pop("metrics_port", None), settings.pop("metrics_host", None)
    node = Scheduler.from_url(url, topics, **settings)
    run_until_signal(node, log, beside=metrics_beside(node, "scheduler", port, host))
    return 0


def worker(ctx: Context) -> int:
    """Run a worker with the ``[worker]`` settings; exits 1 when it abandoned entries on the
    way out."""
    from wheelq.worker.worker import Worker

    url, args = ctx.redis_url(), ctx.args
    settings = ctx.section(
        "worker",
        group=args.group,
        concurrency=args.concurrency,
        start=args.start,
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
    )
    group = settings.pop("group", None) or "default"
    port, host = settings.pop("metrics_port", None), settings.pop("metrics_host", None)
    handler = load_handler(args.handler)
    node = Worker.from_url(url, args.topic, handler, group=group, **settings)
    report = run_worker(node, metrics_beside(node, "worker", port, host))
    return 0 if report.abandoned == 0 else 1


def run_worker(node: Worker, beside: Any = None) -> WorkerStopReport:
    """Run `node` until SIGINT/SIGTERM (a second one hurries the stop); returns its report,
    or leaves the process at once when threads still run sync handlers."""
    report = run_until_signal(
        node, log, "signal: finishing running jobs (a second signal exits at once)", beside
    )
    if not node.runner.is_async and (report.abandoned or node.runner.wedged):
        # Threads still running sync handlers cannot be stopped, and the interpreter would
        # wait for them at exit: leave now (their entries were handed on).
        exit_now(0 if report.abandoned == 0 else 1)
    return report
