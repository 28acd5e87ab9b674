"""`wheelq scheduler` and `wheelq worker`: the long-running roles, in the foreground, and
`load_handler`, which says every mistake in a handler spec in one line.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import logging
import os
import sys
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from wheelq.cli.context import CliError, Context, split_topics, usage_error
from wheelq.cli.metrics import metrics_beside, metrics_flag, metrics_given, pop_metrics
from wheelq.cli.outbox import relay_beside, running_beside
from wheelq.cli.signals import exit_now, run_until_signal

if TYPE_CHECKING:
    from wheelq.tasks.app import App
    from wheelq.worker.worker import Worker, WorkerStopReport


log = logging.getLogger(__name__)
T = TypeVar("T")


def register(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "scheduler", parents=parents, help="run a scheduler node until SIGINT/SIGTERM"
    )
    p.add_argument(
        "--topics", help="comma-separated topics to serve (default: all, incl. new ones)"
    )
    metrics_flag(p)
    p.set_defaults(func=scheduler)

    p = sub.add_parser(
        "worker", parents=parents, help="run a handler on a topic's jobs until SIGINT/SIGTERM"
    )
    p.add_argument(
        "handler",
        help="module:function, a def or async def taking a wheelq.Job; or module:app, a "
        "wheelq.App, to run its tasks (--topic then chooses among them)",
    )
    topics = (
        "the topic; repeat it to serve several, each with an optional weight: --topic "
        "critical=6 --topic default=3 --topic low=1 (weights share the slots; default 1)"
    )
    p.add_argument("--topic", action="append", metavar="TOPIC[=WEIGHT]", help=topics)
    strict = "with several topics: strict priority, highest weight (or first named) first"
    p.add_argument("--strict", action="store_true", help=strict)
    p.add_argument("--group", help="consumer group (default: [worker] group, else 'default')")
    p.add_argument("--concurrency", type=int, help="handlers at once (default 10)")
    start = (
        "where a new group starts: every entry still in the stream (earliest, the "
        "default) or only jobs fired from now on"
    )
    p.add_argument("--from", dest="start", choices=["earliest", "now"], help=start)
    metrics_flag(p)
    p.set_defaults(func=worker)


def scheduler(ctx: Context) -> int:
    from wheelq.scheduler.scheduler import Scheduler

    url = ctx.redis_url()
    flag = None if ctx.args.topics is None else split_topics(ctx.args.topics, "--topics")
    settings = ctx.section("scheduler", topics=flag, **metrics_given(ctx.args))
    topics = settings.pop("topics", None)
    if topics is not None:  # from the file unless checked already (the flag, the environment)
        topics = split_topics(topics, "[scheduler] topics")
    metrics = pop_metrics(settings)
    node = Scheduler.from_url(url, topics, **settings)
    relay = relay_beside(ctx, url)
    also = () if relay is None else (relay,)
    served = metrics_beside(node, "scheduler", *metrics, also=also)
    run_until_signal(node, log, beside=running_beside(relay, served))
    return 0


def worker(ctx: Context) -> int:
    """Run a worker; exits 1 when it abandoned entries on the way out."""
    from wheelq.worker.worker import Worker

    args = ctx.args
    flags = {"group": args.group, "concurrency": args.concurrency, "start": args.start}
    settings = ctx.section("worker", **flags, **metrics_given(args))
    group = settings.pop("group", None) or "default"
    metrics = pop_metrics(settings)
    app = _app_or_none(args.handler)
    if app is not None:
        node = _app_worker(ctx, app, settings)
    else:
        if not args.topic:
            raise usage_error("--topic is required (a handler runs on the topics named)")
        handler = load_handler(args.handler)
        topics = topic_flags(args.topic)
        url = ctx.redis_url()
        node = Worker.from_url(url, topics, handler, group=group, strict=args.strict, **settings)
    report = run_worker(node, metrics_beside(node, "worker", *metrics))
    return 0 if report.abandoned == 0 else 1


def _app_or_none(spec: str) -> App | None:
    """The `wheelq.App` `spec` names, or None when it names something else."""
    from wheelq.tasks.app import App

    target = handler_object(spec)
    return target if isinstance(target, App) else None


def _app_worker(ctx: Context, app: App, settings: dict[str, Any]) -> Worker:
    """`wheelq worker MODULE:APP`: the app's worker of the tasks ``--topic`` names (all),
    in the app's group, on ``--redis-url`` when given, else the app's URL."""
    import dataclasses

    from wheelq.errors import InvalidArgumentError

    args = ctx.args
    if args.group is not None and args.group != app.group:
        raise usage_error(f"an app's worker reads in the app's group {app.group!r}: drop --group")
    if args.strict:
        raise usage_error("--strict is for handlers: an app's tasks share the slots evenly")
    settings.pop("start", None)
    url = ctx.given_redis_url()
    if url is not None:
        app.url = url
    tasks = None if not args.topic else [flag.partition("=")[0] for flag in args.topic]
    try:
        return app.worker(tasks, settings=dataclasses.replace(app.worker_settings, **settings))
    except (InvalidArgumentError, TypeError) as exc:
        raise usage_error(f"app {args.handler!r}: {exc}") from None


def topic_flags(flags: list[str]) -> str | dict[str, int]:
    """``--topic`` flags as `Worker` takes them: one topic, or topic -> weight; exit 2."""
    if len(flags) == 1 and "=" not in flags[0]:
        return flags[0]
    weights: dict[str, int] = {}
    for flag in flags:
        name, sep, weight = flag.partition("=")
        if name in weights:
            raise usage_error(f"--topic {name} is given twice")
        if not sep:
            weights[name] = 1
        elif weight.isdigit():
            weights[name] = int(weight)
        else:
            raise usage_error(f"--topic {flag!r}: the weight after '=' must be a whole number >= 1")
    return weights


def run_worker(node: Worker, beside: Any = None) -> WorkerStopReport:
    """Run `node` until SIGINT/SIGTERM; leaves at once when threads still run sync handlers."""
    report = run_until_signal(
        node, log, "signal: finishing running jobs (a second signal exits at once)", beside
    )
    if node.threads_used and (report.abandoned or node.wedged):
        # the interpreter would wait for those threads at exit (their entries were handed on)
        exit_now(0 if report.abandoned == 0 else 1)
    return report


def load_handler(spec: str) -> Any:
    """Import ``module:function`` from the current directory or sys.path; exit 2 or 1."""
    target = handler_object(spec)
    if not callable(target):
        raise usage_error(
            f"handler {spec!r} is not callable (type {type(target).__name__}): "
            "it must be a def or async def taking a wheelq.Job"
        )
    from wheelq.errors import InvalidHandlerError
    from wheelq.worker.handler_runner import check_handler

    try:
        return check_handler(target)  # the worker's own rules (generators, signature)
    except InvalidHandlerError as exc:
        raise usage_error(f"handler {spec!r}: {exc}") from exc


def handler_object(spec: str) -> Any:
    """What the handler spec ``module:function`` (or ``module:app``) names; exit 2 or 1."""
    from wheelq.tasks.loading import load_object

    return imported(lambda: load_object(spec, "handler", "function"), spec, "handler")


def imported(load: Callable[[], T], spec: str, what: str) -> T:
    """What `load` (a `wheelq.tasks.loading` loader of `spec`) answers, from the current
    directory or sys.path: exit 2 for a spec that names nothing, 1 for a module that fails
    to import (`what`: "handler", "app"), each said in one line."""
    from wheelq.errors import InvalidSpecError

    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return load()
    except InvalidSpecError as exc:
        raise usage_error(str(exc)) from None
    except Exception as exc:
        raise _import_failure(spec.partition(":")[0], exc, what) from None


def _import_failure(module_name: str, exc: BaseException, kind: str) -> CliError:
    """One line for a module that raised while importing: the error and its innermost frame
    in the handler's (or app's) own module (or package), else the innermost frame."""
    if isinstance(exc, SyntaxError):
        said, file, line = f"SyntaxError: {exc.msg}", exc.filename, exc.lineno
    else:
        said = "".join(traceback.format_exception_only(exc)).strip().splitlines()[0]
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename[:1] != "<"]
        own = [f for f in frames if _is_within(f.filename, _source_of(module_name))]
        chosen = own or frames
        file, line = (chosen[-1].filename, chosen[-1].lineno) if chosen else (None, None)
    where = f"{_shown(file)}:{line}: " if file else ""
    return CliError(f"importing {kind} module {module_name!r} failed: {where}{said}")


def _source_of(module_name: str) -> str | None:
    top = module_name.partition(".")[0]
    try:
        found = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if found is None or found.origin is None:
        return None
    if found.submodule_search_locations is not None:
        return os.path.dirname(found.origin)
    return found.origin


def _is_within(filename: str, source: str | None) -> bool:
    if source is None:
        return False
    filename, source = os.path.abspath(filename), os.path.abspath(source)
    return filename == source or filename.startswith(source + os.sep)


def _shown(filename: str) -> str:
    absolute = os.path.abspath(filename)
    return os.path.relpath(absolute) if _is_within(absolute, os.getcwd()) else filename
