"""The `wheelq` command: the only place that reads env vars, config files and signals.
Each module registers its commands and lazy-imports what they run; a user's error is one
line on stderr and exit 2 (usage) or 1 (runtime).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from wheelq import __version__
from wheelq.cli import (
    events,
    jobs,
    outbox,
    processes,
    run,
    schedules,
    serve,
    server,
    services,
    top,
    topics,
)
from wheelq.cli.context import ENVIRONMENT, CliError, Context, redacted, url_hint, usage_error
from wheelq.cli.signals import exit_on_sigterm

DESCRIPTION = """\
Delayed jobs on Redis that fire on time. Run scheduler nodes and workers, enqueue,
cancel and reschedule jobs, inspect topics, list, replay or purge dead letters, and serve
it all over HTTP with callbacks and a dashboard."""

EXAMPLE = """\
first steps (see README.md):
  wheelq server                                   a local Valkey on 127.0.0.1:6379
  wheelq scheduler --redis-url redis://127.0.0.1:6379/0
  wheelq worker handlers:send_email --topic emails --redis-url redis://127.0.0.1:6379/0
  wheelq enqueue emails '{"to": "ada@example.com"}' --delay 5 --redis-url redis://127.0.0.1:6379/0
  wheelq schedule add digest emails '{"kind": "daily"}' --cron '0 8 * * *' --tz Europe/Berlin \
      --redis-url redis://127.0.0.1:6379/0
  wheelq serve --redis-url redis://127.0.0.1:6379/0        the HTTP API on 127.0.0.1:8080
"""

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


class _Parser(argparse.ArgumentParser):
    """Usage errors on one line."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def _log_level(text: str) -> str:
    if text.upper() not in LEVELS:
        raise argparse.ArgumentTypeError(f"must be one of {', '.join(LEVELS)}, got {text!r}")
    return text.upper()


def build_parser() -> argparse.ArgumentParser:
    """The whole command line; options shared by every command also work after it."""
    logs = _Parser(add_help=False)
    unset = argparse.SUPPRESS  # absent unless given: a subcommand copy never resets the top one
    logs.add_argument("--log-level", type=_log_level, default=unset, help=f"{'/'.join(LEVELS)}")
    connects = _Parser(add_help=False, parents=[logs])
    url = "redis://[user:password@]host:port/db or rediss:// (percent-encode @ / : in them)"
    connects.add_argument("--redis-url", default=unset, help=url)
    config = "TOML settings file (see config/wheelq.toml)"
    connects.add_argument("--config", default=unset, help=config)
    env = "\n".join(f"  {name:<24} {text}" for name, text in ENVIRONMENT.items())
    parser = _Parser(
        prog="wheelq",
        description=DESCRIPTION,
        epilog=f"environment:\n{env}\n\n{EXAMPLE}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[logs],
    )
    parser.add_argument("--version", action="version", version=f"wheelq {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    services.register(sub, [connects])
    run.register(sub, [connects])
    jobs.register(sub, [connects])
    jobs.register_job(sub, [connects])
    jobs.register_lists(sub, [connects])
    topics.register(sub, [connects])
    topics.register_groups(sub, [connects])
    top.register(sub, [connects])
    processes.register(sub, [connects])
    topics.register_dlq(sub, [connects])
    events.register(sub, [connects])
    schedules.register(sub, [connects])
    serve.register(sub, [connects])
    outbox.register(sub, [connects])
    server.register(sub, [connects], logs)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns its exit status (143 when SIGTERM ended a command that has
    no graceful stop of its own: `wheelq.cli.signals.exit_on_sigterm`)."""
    with exit_on_sigterm():
        return _main(argv)


def _main(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    name, ctx = f"wheelq {args.command}", Context(args)
    try:
        try:
            level = getattr(args, "log_level", None) or _log_level(
                os.environ.get("WHEELQ_LOG_LEVEL", "INFO")
            )
        except argparse.ArgumentTypeError as exc:
            raise usage_error(f"WHEELQ_LOG_LEVEL {exc}") from exc
        logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        ctx = Context.load(args)
        status = int(args.func(ctx))
        sys.stdout.flush()  # here, so a closed pipe is caught below
        return status
    except BrokenPipeError:
        # the reader went away (`wheelq dlq list t | head`): stop quietly, as `cat` would
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except KeyboardInterrupt:
        return 130
    except CliError as exc:
        return _fail(name, str(exc), exc.code)
    except Exception as exc:
        described = _describe(exc, ctx)
        if described is None:
            raise  # a bug, not a mistake: its traceback is what a report needs
        return _fail(name, *described)


def _describe(exc: Exception, ctx: Context) -> tuple[str, int] | None:
    """One line and an exit status for an error a user can cause; None for anything else."""
    from redis.exceptions import AuthenticationError, RedisError

    from wheelq.errors import (
        InvalidArgumentError,
        PayloadTypeError,
        RedisUnavailableError,
        WheelqError,
    )

    if isinstance(exc, InvalidArgumentError | PayloadTypeError):
        return str(exc), 2
    # A role's start names the address it waited for; a client call's error does not.
    if isinstance(exc, WheelqError) and not _client_unavailable(exc):
        return str(exc), 1
    if isinstance(exc, RedisError | ConnectionError | TimeoutError | RedisUnavailableError):
        try:
            url = ctx.given_redis_url()
        except CliError:
            url = None
        where = f"Redis at {redacted(url)}" if url else "Redis"
        if isinstance(exc, AuthenticationError):
            return f"{where} refused the credentials: {exc}{url_hint(url)}", 1
        return f"{where}: {exc}{url_hint(url)}", 1
    if isinstance(exc, OSError):
        return str(exc), 1
    return None


def _client_unavailable(exc: Exception) -> bool:
    from wheelq.errors import RedisUnavailableError

    return isinstance(exc, RedisUnavailableError) and not str(exc).startswith("redis at ")


def _fail(name: str, message: str, code: int) -> int:
    lines = message.strip().splitlines() or ["failed"]
    print(f"{name}: {lines[0]}", file=sys.stderr)
    return code
