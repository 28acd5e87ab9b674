"""`wheelq enqueue`, `cancel` and `reschedule`: one job at a time, from a shell."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from wheelq.cli.context import Context
from wheelq.cli.errors import CliError, usage_error

_NOT_PENDING = "it fired, was cancelled, or never existed (a retry waiting its turn is pending)"


def register(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Add the ``enqueue``, ``cancel`` and ``reschedule`` commands."""
    p = sub.add_parser("enqueue", parents=parents, help="enqueue one job; prints its id")
    p.add_argument("topic")
    p.add_argument("payload", help="the payload as JSON (quote strings: '\"hi\"'); - reads stdin")
    _due_options(p, required=False)
    p.add_argument("--id", dest="job_id", help="your own job id (unique while pending)")
    p.add_argument("--max-attempts", type=int, help="runs before it is dead-lettered (1-1000)")
    p.add_argument("--replace", action="store_true", help="replace a pending job of that --id")
    p.add_argument(
        "--traceparent", help="the W3C traceparent of the trace the job belongs to (00-...-...-..)"
    )
    p.set_defaults(func=enqueue)

    p = sub.add_parser("cancel", parents=parents, help="cancel a pending job")
    p.add_argument("topic")
    p.add_argument("job_id")
    p.set_defaults(func=cancel)

    p = sub.add_parser("reschedule", parents=parents, help="move a pending job to a new time")
    p.add_argument("topic")
    p.add_argument("job_id")
    _due_options(p, required=True)
    p.set_defaults(func=reschedule)


def _due_options(p: argparse.ArgumentParser, *, required: bool) -> None:
    due = p.add_mutually_exclusive_group(required=required)
    due.add_argument("--delay", type=float, help="seconds from now (default: due now)")
    due.add_argument(
        "--at",
        type=when,
        help="epoch seconds (not ms), or ISO 8601 with an offset (2030-01-01T09:00Z); "
        "at most ten years ahead",
    )


@contextmanager
def _due_flags() -> Iterator[None]:
    """A refused --delay / --at names its flag (the library's message names its parameter)."""
    from wheelq.errors import InvalidDelayError

    try:
        yield
    except InvalidDelayError as exc:
        raise usage_error(f"--{exc.parameter}: {exc}") from exc


def when(text: str) -> float | datetime:
    """An argparse type: epoch seconds, or ISO 8601 with a UTC offset."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected epoch seconds or ISO 8601 like 2030-01-01T09:00:00+00:00, got {text!r}"
        ) from None
    if at.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} needs a UTC offset, like {text}Z or +02:00")
    return at


def json_payload(text: str) -> object:
    """A payload argument: JSON, or stdin's when it is "-" (exit 2 if it is not JSON)."""
    if text == "-":
        text = sys.stdin.read()
    try:
        return json.loads(text)
    except ValueError as exc:
        raise usage_error(
            f"payload is not valid JSON ({exc}); a string needs quotes: '\"hello\"'"
        ) from exc


def enqueue(ctx: Context) -> int:
    """Enqueue one job and print its id; exit 1 when its --id is pending (without --replace)."""
    from wheelq.errors import DuplicateJobError

    args = ctx.args
    payload = json_payload(args.payload)
    with ctx.client() as client, _due_flags():
        try:
            job_id = client.enqueue(
                args.topic,
                payload,
                delay=args.delay,
                at=args.at,
                job_id=args.job_id,
                max_attempts=args.max_attempts,
                replace=args.replace,
                traceparent=args.traceparent,
            )
        except DuplicateJobError as exc:
            raise CliError(
                f"job {args.job_id!r} is already pending on {args.topic!r}; "
                "pass --replace to replace it"
            ) from exc
    print(job_id)
    return 0


def cancel(ctx: Context) -> int:
    """Cancel a pending job; exit 1 when it is not pending."""
    with ctx.client() as client:
        if not client.cancel(ctx.args.topic, ctx.args.job_id):
            raise CliError(
                f"job {ctx.args.job_id!r} is not pending on {ctx.args.topic!r}: " + _NOT_PENDING
            )
    print(f"cancelled {ctx.args.job_id}")
    return 0


def reschedule(ctx: Context) -> int:
    """Move a pending job to --delay / --at; exit 1 when it is not pending."""
    args = ctx.args
    with ctx.client() as client, _due_flags():
        if not client.reschedule(args.topic, args.job_id, delay=args.delay, at=args.at):
            raise CliError(f"job {args.job_id!r} is not pending on {args.topic!r}: " + _NOT_PENDING)
    print(f"rescheduled {args.job_id}")
    return 0
