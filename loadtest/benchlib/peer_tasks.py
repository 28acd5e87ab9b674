"""Worker side of the peer benchmarks: the no-op handlers and one runner per library.

    python -m benchlib.peer_tasks arq --url URL --queue Q [--poll-delay-s 0.01]
    python -m benchlib.peer_tasks rq --url URL --queue Q [--no-scheduler]
    python -m benchlib.peer_tasks rq-scheduler --url URL --queue Q --interval-s 0
    python -m benchlib.peer_tasks dramatiq --url URL --namespace NS --queue Q \\
        [--worker-timeout-ms 10]
    python -m benchlib.peer_tasks bullmq --url URL --queue Q --concurrency 50

(run from ``loadtest/``, or with it on PYTHONPATH). Each runner starts the library's own
worker class in this process, the way its CLI would, with WARNING logs; an option left out
keeps the library's default. SIGTERM stops it. ``bullmq`` replaces this process with
``node loadtest/peers/bullmq/bench.js worker`` (`benchlib.peer_bullmq`), whose handler
writes the same lines.

Every handler appends one line, ``<index> <due ms> <start ms>``, to the file named by
``PEER_RECORD_FILE``: one ``os.write`` on an ``O_APPEND`` descriptor per job, so threads
and forked processes never interleave lines, and nothing is lost when a process is killed.
The start is ``time.time()`` read first thing in the handler; the bench runs on one
machine, so producer and worker share that clock.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import time
from typing import Any

RECORD_ENV = "PEER_RECORD_FILE"
DRAMATIQ_ACTOR = "peer_record"

_fds: dict[int, int] = {}  # pid -> record file descriptor (a forked child opens its own)


def record(index: int, due_ms: float, start_ms: float) -> None:
    """Append this job's line to the record file."""
    pid = os.getpid()
    fd = _fds.get(pid)
    if fd is None:
        fd = _fds[pid] = os.open(
            os.environ[RECORD_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644
        )
    os.write(fd, f"{index} {due_ms:.3f} {start_ms:.3f}\n".encode())


async def arq_record(ctx: dict[str, Any], index: int, due_ms: float) -> None:
    """arq job (a coroutine, as arq requires)."""
    record(index, due_ms, time.time() * 1000)


def rq_record(index: int, due_ms: float) -> None:
    """rq job (runs in the work horse rq forks for each job)."""
    record(index, due_ms, time.time() * 1000)


def dramatiq_record(index: int, due_ms: float) -> None:
    """dramatiq actor body (runs on one of the worker's threads)."""
    record(index, due_ms, time.time() * 1000)


def run_arq(args: argparse.Namespace) -> None:
    from arq.connections import RedisSettings
    from arq.worker import Worker

    options: dict[str, Any] = {}
    if args.poll_delay_s is not None:
        options["poll_delay"] = args.poll_delay_s
    worker = Worker(
        functions=[arq_record],
        queue_name=args.queue,
        redis_settings=RedisSettings.from_dsn(args.url),
        **options,
    )
    worker.run()  # arq's own SIGINT/SIGTERM handlers end it


def run_rq(args: argparse.Namespace) -> None:
    from redis import Redis
    from rq import Queue, Worker

    conn = Redis.from_url(args.url)
    worker = Worker(
        [Queue(args.queue, connection=conn)], connection=conn, name=f"{args.queue}-worker"
    )
    # `rq worker --with-scheduler`: the worker forks RQ's scheduler (1 s interval).
    worker.work(with_scheduler=not args.no_scheduler, logging_level="WARNING")


def run_rq_scheduler(args: argparse.Namespace) -> None:
    from redis import Redis
    from rq.scheduler import RQScheduler

    conn = Redis.from_url(args.url)
    # A whole number of seconds: rq sets its lock's TTL to interval + 60 with a Redis
    # command that rejects a fractional value. 0 means no sleep between passes.
    interval = int(args.interval_s) if args.interval_s.is_integer() else args.interval_s
    scheduler = RQScheduler(
        [args.queue], connection=conn, interval=interval, logging_level="WARNING"
    )
    scheduler.acquire_locks()
    scheduler.work()  # loops until SIGTERM (its own handler), then releases its lock


def run_dramatiq(args: argparse.Namespace) -> None:
    import dramatiq
    from dramatiq.brokers.redis import RedisBroker

    from wheelq.cli.signals import SignalFlag

    broker = RedisBroker(url=args.url, namespace=args.namespace)
    dramatiq.set_broker(broker)
    dramatiq.actor(dramatiq_record, actor_name=DRAMATIQ_ACTOR, queue_name=args.queue)
    broker.emit_after("process_boot")  # what the dramatiq CLI does in a worker process
    options: dict[str, Any] = {}
    if args.worker_timeout_ms is not None:
        options["worker_timeout"] = args.worker_timeout_ms
    worker = dramatiq.Worker(broker, **options)  # worker_threads: the default, 8
    stop = SignalFlag(signal.SIGTERM, signal.SIGINT)
    worker.start()
    while not stop.wait(0.2):
        pass
    worker.stop(timeout=10_000)
    broker.close()


def run_bullmq(args: argparse.Namespace) -> None:
    from benchlib.peer_bullmq import node_command

    argv = node_command("worker", "--url", args.url, "--queue", args.queue)
    os.execv(argv[0], [*argv, "--concurrency", str(args.concurrency)])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("lib", choices=["arq", "rq", "rq-scheduler", "dramatiq", "bullmq"])
    p.add_argument("--url", required=True)
    p.add_argument("--queue", required=True)
    p.add_argument("--namespace", default="dramatiq")
    p.add_argument("--poll-delay-s", type=float)
    p.add_argument("--no-scheduler", action="store_true")
    p.add_argument("--interval-s", type=float, default=1.0)
    p.add_argument("--worker-timeout-ms", type=int)
    p.add_argument("--concurrency", type=int, default=1)
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    runner = {
        "arq": run_arq,
        "rq": run_rq,
        "rq-scheduler": run_rq_scheduler,
        "dramatiq": run_dramatiq,
        "bullmq": run_bullmq,
    }[args.lib]
    runner(args)


if __name__ == "__main__":
    main()
