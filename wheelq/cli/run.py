"""`wheelq run MODULE:APP`: a scheduler node and a worker of every task of an `App`, in one
process (docs/guides/tasks.md, "Running"; split the roles with `wheelq scheduler` and
`wheelq worker MODULE:APP` when a deployment grows).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING, Any

from wheelq.cli.context import Context, split_topics, usage_error
from wheelq.cli.metrics import metrics_beside, pop_metrics
from wheelq.cli.services import imported, run_worker

if TYPE_CHECKING:
    from wheelq.scheduler.scheduler import Scheduler
    from wheelq.tasks.app import App

log = logging.getLogger(__name__)


def register(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "run",
        parents=parents,
        help="run an app's tasks: a scheduler node and a worker in one process, until "
        "SIGINT/SIGTERM",
    )
    p.add_argument("app", help="module:app, a wheelq.App (its tasks' module, importable)")
    add_flags(p)
    p.set_defaults(func=run)


RUN_FLAGS = ("tasks", "no_scheduler")
"""`add_flags`' flags that `run_app` reads from its ``args``."""
WORKER_FLAGS = ("concurrency", "metrics_port", "metrics_host")
"""`add_flags`' flags that are ``[worker]`` settings (`worker_flags`): given, they go over
the config file's, the environment's and the app's. Every flag is one or the other
(tests/unit/test_run_faces.py), so both faces pass each one on."""


def add_flags(p: argparse.ArgumentParser) -> None:
    """The flags of running an app, `wheelq run`'s and ``manage.py wheelq run``'s: the one
    definition of both (`RUN_FLAGS`, `WORKER_FLAGS`)."""
    p.add_argument(
        "--tasks",
        metavar="NAMES",
        action="append",
        help="comma-separated task names or topics to run, and more with each --tasks "
        "(default: every task of the app)",
    )
    p.add_argument("--concurrency", type=int, help="handlers at once (default: the app's, 10)")
    p.add_argument(
        "--no-scheduler",
        action="store_true",
        help="run the worker only (scheduler nodes run elsewhere: `wheelq scheduler`)",
    )
    port = (
        "serve the worker's and the scheduler's Prometheus metrics on "
        "http://HOST:PORT/metrics (default 0: off)"
    )
    p.add_argument("--metrics-port", type=int, help=port)
    p.add_argument("--metrics-host", help="address the metrics listen on (default 0.0.0.0)")


def worker_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The ``[worker]`` settings `add_flags`' flags give (None: not given)."""
    return {key: getattr(args, key) for key in WORKER_FLAGS}


def load_app(spec: str) -> App:
    """``module:app`` as a `wheelq.App`; exit 2 for anything else."""
    from wheelq.tasks import loading

    return imported(lambda: loading.load_app(spec), spec, "app")


def run(ctx: Context) -> int:
    """Run the app's worker (and a scheduler node beside it); exits 1 when the worker
    abandoned entries on the way out."""
    args = ctx.args
    app = load_app(args.app)
    url = ctx.given_redis_url()
    if url is not None:  # --redis-url, WHEELQ_REDIS_URL or [redis] url: over the app's
        app.url = url
    worker_given = ctx.section("worker", **worker_flags(args))
    return run_app(app, args, worker_given, ctx.section("scheduler"), label=args.app)


def run_app(
    app: App,
    args: argparse.Namespace,
    worker_given: dict[str, Any],
    scheduler_given: dict[str, Any],
    *,
    label: str,
) -> int:
    """Run `app`'s worker of the tasks ``args.tasks`` names (and a scheduler node beside
    it, unless ``args.no_scheduler``) until SIGINT/SIGTERM: `wheelq run` and ``manage.py
    wheelq run`` (wheelq.contrib.django). `worker_given` and `scheduler_given` go over the
    app's settings; `label` names the app in errors.

    Returns:
        0, or 1 when the worker abandoned entries on the way out.

    Raises:
        CliError: A bad flag or setting (code 2), a metrics port taken (code 1).
    """
    from wheelq.errors import InvalidArgumentError

    tasks = None if args.tasks is None else split_topics(",".join(args.tasks), "--tasks")
    metrics = pop_metrics(worker_given)
    worker_given.pop("group", None)  # the app's group: its handles wait on it
    for key in ("topics", "metrics_port", "metrics_host"):
        scheduler_given.pop(key, None)
    try:
        worker_settings = dataclasses.replace(app.worker_settings, **worker_given)
        scheduler_settings = dataclasses.replace(app.scheduler_settings, **scheduler_given)
        node = app.worker(tasks, settings=worker_settings)
        scheduler = None if args.no_scheduler else app.scheduler(tasks, settings=scheduler_settings)
    except (InvalidArgumentError, TypeError) as exc:
        raise usage_error(f"app {label!r}: {exc}") from None
    names = ", ".join(t.name for t in app.chosen(tasks))
    log.info("running %s (group %s)%s", names, app.group, "" if scheduler else ", no scheduler")
    also = () if scheduler is None else (scheduler,)  # its shard gauges and forecast too
    beside = _beside(scheduler, metrics_beside(node, "worker", *metrics, also=also))
    from wheelq.tasks.periodic import start_sync

    start_sync(app, log)  # the stored schedules match the app's periodic declarations
    report = run_worker(node, beside)
    return 0 if report.abandoned == 0 else 1


def _beside(
    scheduler: Scheduler | None,
    metrics: Callable[[], AbstractAsyncContextManager[object]] | None,
) -> Callable[[], AbstractAsyncContextManager[object]]:
    """What runs on the worker's loop beside it: the scheduler node, started before the
    worker reads and stopped after it has finished (its leases released), and the metrics."""

    @asynccontextmanager
    async def both() -> AsyncIterator[object]:
        async with AsyncExitStack() as stack:
            if scheduler is not None:
                await scheduler.start()
                stack.push_async_callback(scheduler.stop)
            if metrics is not None:
                await stack.enter_async_context(metrics())
            yield scheduler

    return both
