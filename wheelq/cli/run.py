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
from wheelq.cli.outbox import relay_for, running_beside
from wheelq.cli.services import imported, load_handler, run_worker
from wheelq.cli.signals import run_until_signal

if TYPE_CHECKING:
    from wheelq.outbox.relay import Relay
    from wheelq.scheduler.scheduler import Scheduler
    from wheelq.tasks.app import App
    from wheelq.worker.handler_runner import Handler

log = logging.getLogger(__name__)
METRICS = ("metrics_port", "metrics_host")  # the run's own metrics serve the relay's too


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


RUN_FLAGS = ("tasks", "topic", "no_scheduler", "relay_dsn")
"""`add_flags`' flags that `run_app` reads from its ``args``."""
WORKER_FLAGS = ("concurrency", "metrics_port", "metrics_host")
"""`add_flags`' flags that are ``[worker]`` settings (`worker_flags`): given, they go over
the config file's, the environment's and the app's. Every flag is one or the other
(tests/unit/test_run_faces.py), so both faces pass each one on."""
WORKER_ROLE = ("tasks", "topic", "concurrency", "metrics_port", "metrics_host")
"""The flags of an app's worker alone (``manage.py wheelq worker``)."""
SCHEDULER_ROLE = ("tasks", "topic", "metrics_port", "metrics_host")
"""The flags of an app's scheduler node alone (``manage.py wheelq scheduler``)."""
PLAIN = "TOPIC=MODULE:HANDLER"


def add_flags(
    p: argparse.ArgumentParser, dests: tuple[str, ...] = RUN_FLAGS + WORKER_FLAGS
) -> None:
    """The flags of running an app, `wheelq run`'s and ``manage.py wheelq run``'s: the one
    definition of both (`RUN_FLAGS`, `WORKER_FLAGS`); `dests` chooses some (`WORKER_ROLE`,
    `SCHEDULER_ROLE`: Django's ``worker`` and ``scheduler``)."""
    port = (
        "serve the worker's and the scheduler's Prometheus metrics on "
        "http://HOST:PORT/metrics (default 0: off)"
    )
    flags: dict[str, tuple[str, dict[str, Any]]] = {
        "tasks": (
            "--tasks",
            {
                "metavar": "NAMES",
                "action": "append",
                "help": "comma-separated task names or topics to run, and more with each "
                "--tasks (default: every task of the app)",
            },
        ),
        "topic": (
            "--topic",
            {
                "metavar": PLAIN,
                "action": "append",
                "help": "a plain topic to lead and run too, its jobs run by the handler "
                "MODULE:HANDLER (a def or async def taking a wheelq.Job); repeat it for more",
            },
        ),
        "concurrency": (
            "--concurrency",
            {"type": int, "help": "handlers at once (default: the app's, 10)"},
        ),
        "no_scheduler": (
            "--no-scheduler",
            {
                "action": "store_true",
                "help": "run the worker only (scheduler nodes run elsewhere: `wheelq scheduler`)",
            },
        ),
        "relay_dsn": (
            "--relay-dsn",
            {
                "metavar": "DSN",
                "help": "run the outbox relay of this PostgreSQL too, postgresql://user@host:"
                "5432/db (its password from PGPASSWORD or ~/.pgpass, off the command line; "
                "[relay] settings apply; default: no relay)",
            },
        ),
        "metrics_port": ("--metrics-port", {"type": int, "help": port}),
        "metrics_host": (
            "--metrics-host",
            {"help": "address the metrics listen on (default 0.0.0.0)"},
        ),
    }
    for dest, (flag, options) in flags.items():
        if dest in dests:
            p.add_argument(flag, dest=dest, **options)


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
    scheduler_given = ctx.section("scheduler")
    return run_app(
        app, args, worker_given, scheduler_given, label=args.app, relay=ctx.section("relay")
    )


def run_app(
    app: App,
    args: argparse.Namespace,
    worker_given: dict[str, Any],
    scheduler_given: dict[str, Any],
    *,
    label: str,
    relay: dict[str, Any] | None = None,
    around: Callable[[Handler], Handler] | None = None,
) -> int:
    """Run `app`'s worker of the tasks ``args.tasks`` names and the plain topics of
    ``args.topic`` (and a scheduler node leading them beside it, unless
    ``args.no_scheduler``; and the outbox relay of ``args.relay_dsn`` when given) until
    SIGINT/SIGTERM: `wheelq run` and ``manage.py wheelq run|worker``
    (wheelq.contrib.django). `worker_given` and `scheduler_given` go over the app's
    settings, `relay` are the relay's ``[relay]`` settings; `label` names the app in
    errors; `around` wraps each handler (`App.worker`).

    Returns:
        0, or 1 when the worker abandoned entries on the way out.

    Raises:
        CliError: A bad flag or setting (code 2), a metrics port taken (code 1).
    """
    from wheelq.errors import InvalidArgumentError

    tasks = None if args.tasks is None else split_topics(",".join(args.tasks), "--tasks")
    plain = plain_handlers(args.topic or [])
    metrics = pop_metrics(worker_given)
    worker_given.pop("group", None)  # the app's group: its handles wait on it
    for key in ("topics", "metrics_port", "metrics_host"):
        scheduler_given.pop(key, None)
    try:
        worker_settings = dataclasses.replace(app.worker_settings, **worker_given)
        scheduler_settings = dataclasses.replace(app.scheduler_settings, **scheduler_given)
        node = app.worker(tasks, settings=worker_settings, handlers=plain, around=around)
        scheduler = (
            None
            if args.no_scheduler
            else app.scheduler(tasks, settings=scheduler_settings, topics=plain)
        )
    except (InvalidArgumentError, TypeError) as exc:
        raise usage_error(f"app {label!r}: {exc}") from None
    outbox = None if not args.relay_dsn else app_relay(app, args.relay_dsn, relay or {})
    names = ", ".join([t.name for t in app.chosen(tasks)] + list(plain))
    log.info("running %s (group %s)%s", names, app.group, "" if scheduler else ", no scheduler")
    also = tuple(part for part in (scheduler, outbox) if part is not None)  # their gauges too
    served = _beside(scheduler, metrics_beside(node, "worker", *metrics, also=also))
    from wheelq.tasks.periodic import start_sync

    start_sync(app, log)  # the stored schedules match the app's periodic declarations
    report = run_worker(node, running_beside(outbox, served))
    return 0 if report.abandoned == 0 else 1


def run_scheduler(
    app: App, args: argparse.Namespace, scheduler_given: dict[str, Any], *, label: str
) -> int:
    """Run a scheduler node leading the topics of `app`'s tasks ``args.tasks`` names and
    the plain topics of ``args.topic`` (their handlers are not loaded) until
    SIGINT/SIGTERM: ``manage.py wheelq scheduler``. `scheduler_given` goes over the app's
    settings; `label` names the app in errors.

    Raises:
        CliError: A bad flag or setting (code 2), a metrics port taken (code 1).
    """
    from wheelq.errors import InvalidArgumentError

    tasks = None if args.tasks is None else split_topics(",".join(args.tasks), "--tasks")
    plain = [flag.partition("=")[0] for flag in args.topic or []]
    metrics = pop_metrics(scheduler_given)
    scheduler_given.pop("topics", None)
    try:
        settings = dataclasses.replace(app.scheduler_settings, **scheduler_given)
        node = app.scheduler(tasks, settings=settings, topics=plain)
    except (InvalidArgumentError, TypeError) as exc:
        raise usage_error(f"app {label!r}: {exc}") from None
    log.info("leading %s", ", ".join(node.topics or ()))
    run_until_signal(node, log, beside=metrics_beside(node, "scheduler", *metrics))
    return 0


def plain_handlers(flags: list[str]) -> dict[str, Handler]:
    """``--topic TOPIC=MODULE:HANDLER`` flags as topic -> handler, each loaded as `wheelq
    worker` loads its handler (`load_handler`); exit 2 for a flag of another form, a topic
    given twice, or a spec that names no handler (the loader's line)."""
    handlers: dict[str, Handler] = {}
    for flag in flags:
        topic, _, spec = flag.partition("=")
        if not topic or not spec:
            raise usage_error(f"--topic must be {PLAIN}, got {flag!r:.80}")
        if topic in handlers:
            raise usage_error(f"--topic {topic} is given twice")
        handlers[topic] = load_handler(spec)
    return handlers


def app_relay(app: App, dsn: str, relay: dict[str, Any]) -> Relay:
    """The outbox relay of `dsn` with the ``[relay]`` settings `relay`, placing jobs in
    `app`'s Redis through a client of its own with the app's client settings (exit 2 for
    a bad setting or a missing driver)."""
    values = {key: value for key, value in relay.items() if key not in ("dsn", *METRICS)}
    return relay_for(app.url, client_options(app), {**values, "dsn": dsn})


def client_options(app: App) -> dict[str, Any]:
    """What `AsyncClient.from_url` takes to connect as `app`'s own clients do."""
    settings = app.client_settings
    options = {f.name: getattr(settings, f.name) for f in dataclasses.fields(settings)}
    return options | {"redis_options": app.redis_options, "cluster": app.cluster}


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
