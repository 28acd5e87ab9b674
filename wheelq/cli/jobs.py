"""Jobs from a shell: `wheelq enqueue`, `cancel`, `reschedule`, `job`, and `wheelq jobs list`
(a topic's jobs by state, a page at a time)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from wheelq.cli.context import CliError, Context, command, usage_error
from wheelq.core.due import utc_text
from wheelq.core.options import OPTIONS
from wheelq.core.payload import jsonable

if TYPE_CHECKING:
    from wheelq.core.history import GroupInfo, JobInfo
    from wheelq.core.options import ItemOptions, Option


_JOB = ("topic", "job_id")
_NOT_PENDING = "it fired, was cancelled, or never existed (a retry waiting its turn is pending)"


def register(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("enqueue", parents=parents, help="enqueue one job; prints its id")
    p.add_argument("topic")
    p.add_argument("payload", help="the payload as JSON (quote strings: '\"hi\"'); - reads stdin")
    _due_options(p, required=False)
    p.add_argument("--id", dest="job_id", help="your own job id (unique while pending)")
    p.add_argument("--max-attempts", type=int, help="runs before it is dead-lettered (1-1000)")
    p.add_argument("--replace", action="store_true", help="replace a pending job of that --id")
    option_flags(p, OPTIONS)  # then each option the table gives a flag: --traceparent, --key, ...
    p.add_argument(
        "--after",
        metavar="JOB_ID",
        help="run this job --delay seconds after that job succeeds (it awaits until then); "
        "of this topic, or of --after-topic",
    )
    p.add_argument("--after-topic", help="--after's topic (default: this topic)")
    p.add_argument(
        "--after-group", default="default", help="the group whose outcome of --after counts"
    )
    p.add_argument(
        "--on-parent-failure",
        choices=("cancel", "run"),
        help="if --after's job is dead-lettered, cancelled or expired (default cancel)",
    )
    p.set_defaults(func=enqueue)

    p = command(sub, "children", parents, "a flow's children, one JSON line each", children)
    p.add_argument("topic")
    p.add_argument("job_id", help="the flow's id (its parent's)")

    p = command(sub, "cancel", parents, "cancel a pending job, or a key's (--key)", cancel)
    _job_or_key(p)
    p.add_argument(
        "--tree",
        action="store_true",
        help="also a flow parent's children (and theirs) and every job that follows one",
    )
    p = command(sub, "reschedule", parents, "move a pending job, or a key's (--key)", reschedule)
    _job_or_key(p)
    _due_options(p, required=False)
    p.add_argument(
        "--by", type=float, help="--key or --tree: move each job by this many seconds (either sign)"
    )
    p.add_argument("--to", type=when, help="--key or --tree: move every job to this time (as --at)")
    p.add_argument(
        "--tree",
        action="store_true",
        help="with --by or --to: every pending job of the job's tree (as cancel --tree's)",
    )


def _job_or_key(p: argparse.ArgumentParser) -> None:
    p.add_argument("topic")
    p.add_argument("job_id", nargs="?", help="the job's id (or --key)")
    p.add_argument("--key", help="every pending job of this key instead (the key index)")


def option_flags(p: argparse.ArgumentParser, options: Iterable[Option]) -> None:
    """A flag for each of `options` the table gives one (`Option.cli`; bool: a switch), its
    help the table's words."""
    for o in options:
        flag = "--" + o.name.replace("_", "-")
        if o.cli is bool:
            p.add_argument(flag, action="store_true", help=o.doc)
        elif o.cli is not None:
            p.add_argument(flag, type=o.cli, help=o.doc)


def given_flags(args: argparse.Namespace, options: Iterable[Option]) -> dict[str, Any]:
    """The flags of `option_flags` given (a switch: when set)."""
    flags = {o.name: getattr(args, o.name) for o in options if o.cli is not None}
    # `is`: a flag's 0 (--priority 0, --expires 0) is given, though 0 == False
    return {n: v for n, v in flags.items() if v is not None and v is not False}


def _due_options(p: argparse.ArgumentParser, *, required: bool) -> None:
    due = p.add_mutually_exclusive_group(required=required)
    due.add_argument("--delay", type=float, help="seconds from now (default: due now)")
    at = "epoch seconds (not ms), or ISO 8601 with an offset (2030-01-01T09:00Z); at most "
    due.add_argument("--at", type=when, help=at + "ten years ahead")


@contextmanager
def _due_flags() -> Iterator[None]:
    from wheelq.errors import InvalidDelayError

    try:
        yield
    except InvalidDelayError as exc:
        raise usage_error(f"--{exc.parameter}: {exc}") from exc


def when(text: str) -> float | datetime:
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
    from wheelq.errors import DuplicateJobError

    args = ctx.args
    payload = json_payload(args.payload)
    if args.after is None and (args.after_topic or args.on_parent_failure):
        raise usage_error("--after-topic and --on-parent-failure need --after")
    with ctx.client() as client, _due_flags():
        try:
            options = given_flags(args, OPTIONS)
            if args.after is not None:
                options.update(
                    after=(args.after_topic or args.topic, args.after, args.after_group),
                    on_parent_failure=args.on_parent_failure or "cancel",
                )
            options.update(
                delay=args.delay, at=args.at, job_id=args.job_id,
                max_attempts=args.max_attempts, replace=args.replace,
            )  # fmt: skip
            job_id = client.enqueue(args.topic, payload, **cast("ItemOptions", options))
        except DuplicateJobError as exc:
            raise CliError(
                f"job {args.job_id!r} is already pending on {args.topic!r}; "
                "pass --replace to replace it"
            ) from exc
    print(job_id)
    return 0


def cancel(ctx: Context) -> int:
    args = ctx.args
    if args.tree and (args.key is not None or args.job_id is None):
        raise usage_error("--tree goes with a job id, not --key")
    with ctx.client() as client, _key_flags():
        if args.key is not None or args.job_id is None:
            done = client.cancel(args.topic, args.job_id, key=args.key)  # type: ignore[call-overload]
            print(f"cancelled {done} jobs of key {args.key!r}")
            return 0
        if args.tree:
            print(f"cancelled {client.cancel(args.topic, args.job_id, tree=True)} jobs")
            return 0
        if not client.cancel(args.topic, args.job_id):
            raise CliError(f"job {args.job_id!r} is not pending on {args.topic!r}: " + _NOT_PENDING)
    print(f"cancelled {args.job_id}")
    return 0


def reschedule(ctx: Context) -> int:
    args = ctx.args
    if args.tree and (args.key is not None or args.job_id is None):
        raise usage_error("--tree goes with a job id, not --key")
    with ctx.client() as client, _due_flags(), _key_flags():
        if args.tree:
            moved = client.reschedule(  # type: ignore[call-overload]
                args.topic, args.job_id, delay=args.delay, at=args.at, by=args.by, to=args.to,
                tree=True,
            )  # fmt: skip
            print(f"rescheduled {moved} jobs of the tree of {args.job_id}")
            return 0
        if args.key is not None or args.job_id is None:
            moved = client.reschedule(  # type: ignore[call-overload]
                args.topic, args.job_id, delay=args.delay, at=args.at, key=args.key,
                by=args.by, to=args.to,
            )  # fmt: skip
            print(f"rescheduled {moved} jobs of key {args.key!r}")
            return 0
        if args.delay is None and args.at is None:
            raise usage_error("--delay or --at: when the job is to be due")
        if not client.reschedule(
            args.topic, args.job_id, delay=args.delay, at=args.at, by=args.by, to=args.to
        ):  # type: ignore[call-overload]
            raise CliError(f"job {args.job_id!r} is not pending on {args.topic!r}: " + _NOT_PENDING)
    print(f"rescheduled {args.job_id}")
    return 0


@contextmanager
def _key_flags() -> Iterator[None]:
    """A by-key call's bad argument as a usage error naming its flag."""
    from wheelq.errors import InvalidArgumentError

    try:
        yield
    except InvalidArgumentError as exc:
        name = "job_id" if exc.parameter == "job_id" else f"--{exc.parameter.replace('_', '-')}"
        raise usage_error(f"{name}: {exc}") from exc


def register_job(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "job",
        parents=parents,
        help="show one job's state, whatever it is (with each group's result once it succeeded)",
    )
    p.add_argument("topic")
    p.add_argument("job_id")
    p.add_argument("--json", action="store_true", help="print the JobInfo as one JSON object")
    p.set_defaults(func=show)


def show(ctx: Context) -> int:
    from wheelq.core.history import JobState
    from wheelq.web import as_json

    with ctx.client() as client:
        info = client.get(ctx.args.topic, ctx.args.job_id)
    if ctx.args.json:
        print(json.dumps(as_json(info), sort_keys=True))
    else:
        print(render(info))
    if info.state is JobState.UNKNOWN:
        raise CliError(
            f"nothing is known of job {info.id!r} on {info.topic!r}: never enqueued there, "
            "or its history is past retention"
        )
    return 0


def _first_line(text: str | None) -> str:
    from wheelq.core.retry import error_line

    return error_line(text) or "-"


def render(info: JobInfo) -> str:
    """The JobInfo as aligned lines (only the fields its state has)."""
    from wheelq.core.history import JobState, payload_gone

    rows: list[tuple[str, str]] = [("job", f"{info.id} on {info.topic}"), ("state", info.state)]
    if info.due_ms is not None:
        rows.append(("due", utc_text(info.due_ms)))
    if info.waiting:
        rows.append(("waiting", "on the due line: its turn to enter the stream"))
    if info.attempt is not None:
        rows.append(("attempt", f"{info.attempt} of {info.max_attempts}"))
    if info.fired_ms is not None:
        rows.append(("fired", f"{utc_text(info.fired_ms)} (entry {info.entry_id})"))
    if info.cancelled_ms is not None:
        rows.append(("cancelled", utc_text(info.cancelled_ms)))
    if info.expired_ms is not None:
        rows.append(("expired", f"{utc_text(info.expired_ms)} (dropped at its expiry, never run)"))
    rows += [
        (name, utc_text(value) if name == "expires" else str(value))
        for name, value in info.options.items()
        if value is not None and value is not False  # a priority of 0 is shown
    ]
    if info.last_error:
        rows.append(("last error", _first_line(info.last_error)))
    if info.after is not None:
        rows.append(("after", f"{info.after.job_id} on {info.after.topic}"))
    if info.parent is not None:
        rows.append(("flow parent", f"{info.parent.job_id} on {info.parent.topic}"))
    if info.children:
        rows.append(("children", f"{info.children} (wheelq children {info.topic} {info.id})"))
    rows += [("followed by", f"{c.job_id} on {c.topic}") for c in info.continuations[:20]]
    if len(info.continuations) > 20:
        rows.append(("followed by", f"and {len(info.continuations) - 20} more (--json)"))
    if info.payload_kept:
        rows.append(("payload", json.dumps(jsonable(info.payload))[:200]))
    elif info.state is not JobState.UNKNOWN:
        rows.append(("payload", payload_gone(info)))
    rows += [(f"group {g.group}", _group(g)) for g in info.groups]
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


def _group(g: GroupInfo) -> str:
    parts = [str(g.state)]
    if g.consumer is not None:
        parts.append(f"on {g.consumer} since {utc_text(g.since_ms)}, delivery {g.deliveries}")
        if g.started_ms is not None:
            parts.append(f"started {utc_text(g.started_ms)}")
        elif g.read_ahead:
            parts.append("read ahead: not started")
    if g.finished_ms is not None:
        parts.append(f"at {utc_text(g.finished_ms)}")
    if g.duration_ms is not None:
        parts.append(f"ran {g.duration_ms} ms")
    if g.reason:
        parts.append(f"({g.reason}: {_first_line(g.error)}; dead letter {g.dead_entry_id})")
    if g.paused_since_ms is not None:
        parts.append(f"waiting: the group is paused since {utc_text(g.paused_since_ms)}")
    if g.result is not None:
        parts.append(f"result {json.dumps(jsonable(g.result), ensure_ascii=False)[:200]}")
    return ", ".join(parts)


def register_lists(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    from wheelq.core.job_list import LIST_STATES, MAX_LIST_LIMIT

    p = sub.add_parser("jobs", parents=parents, help="a topic's jobs by state; act on many")
    actions = p.add_subparsers(dest="action", required=True, metavar="{list,bulk}")
    q = actions.add_parser(
        "list",
        parents=parents,
        help="list a topic's jobs in one state, a page at a time (the next page's --cursor "
        "goes to stderr)",
    )
    q.add_argument("topic")
    q.add_argument("--state", required=True, choices=LIST_STATES, help="the state listed")
    q.add_argument("--limit", type=int, default=50, help=f"rows a page (1-{MAX_LIST_LIMIT})")
    q.add_argument("--cursor", help="the cursor a page before printed: the page after it")
    q.add_argument("--due-after", type=when, help="pending, retrying: due at or after this")
    q.add_argument("--due-before", type=when, help="pending, retrying: due before this")
    q.add_argument("--group", help="only rows of this consumer group (every state but pending)")
    q.add_argument("--reason", help="dead: only this reason (failed, deliveries, malformed)")
    q.add_argument("--priority", type=int, help="only jobs of this priority (0-9; every state)")
    q.add_argument("--key", help="only jobs of this key (every state; pending, retrying: indexed)")
    q.add_argument("--all", action="store_true", help="every page, not only the first")
    q.add_argument("--json", action="store_true", help="one JSON object a row")
    q.set_defaults(func=list_jobs)
    _register_bulk(actions, parents)


def _register_bulk(actions: Any, parents: list[argparse.ArgumentParser]) -> None:
    from wheelq.core.bulk_actions import BULK_ACTIONS
    from wheelq.core.job_list import LIST_STATES

    b = actions.add_parser(
        "bulk",
        parents=parents,
        help="cancel, run now or reschedule pending and retrying jobs, replay or purge dead "
        "letters, many at once (--dry-run counts them first)",
    )
    b.add_argument("topic")
    b.add_argument(
        "bulk_action", metavar="ACTION", choices=BULK_ACTIONS, help=", ".join(BULK_ACTIONS)
    )
    b.add_argument("--state", choices=LIST_STATES, help="the filter's state")
    b.add_argument("--due-after", type=when, help="pending, retrying: due at or after this")
    b.add_argument("--due-before", type=when, help="pending, retrying: due before this")
    b.add_argument("--group", help="only jobs of this consumer group")
    b.add_argument("--reason", help="dead: only this reason")
    b.add_argument("--key", help="only jobs of this key (pending, retrying: the key index)")
    b.add_argument("--id", dest="ids", action="append", help="a job by id (repeat; with --state)")
    b.add_argument("--ref", dest="refs", action="append", help="a dead letter by ref (repeat)")
    b.add_argument("--selection", help="a dry run's selection: act on exactly those jobs")
    b.add_argument(
        "--dry-run",
        action="store_true",
        help="count what it would act on; act later with --selection",
    )
    b.add_argument("--at", type=when, help="reschedule: the new due time")
    b.add_argument("--shift-ms", type=int, help="reschedule: move each job by this many ms")
    b.add_argument("--json", action="store_true", help="print the outcome as one JSON object")
    b.set_defaults(func=bulk)


def bulk(ctx: Context) -> int:
    from wheelq.errors import InvalidArgumentError
    from wheelq.web import as_json

    args = ctx.args

    def progress(done: int, total: int) -> None:
        if done % 10_000 < 500 or done == total:
            print(f"{done}/{total}", file=sys.stderr)

    with ctx.admin() as admin:
        try:
            outcome = admin.bulk(
                args.topic, args.bulk_action, state=args.state, due_after=args.due_after,
                due_before=args.due_before, group=args.group, reason=args.reason,
                key=args.key, ids=args.ids, refs=args.refs, selection=args.selection,
                dry_run=args.dry_run, at=args.at, shift_ms=args.shift_ms,
                progress=None if args.json else progress,
            )  # fmt: skip
        except InvalidArgumentError as exc:
            flag = {"ids": "id", "refs": "ref"}.get(exc.parameter, exc.parameter)
            raise usage_error(f"--{flag.replace('_', '-')}: {exc}") from exc
    if args.json:
        print(json.dumps(as_json(outcome), sort_keys=True))
    elif outcome.dry_run:
        print(f"{outcome.matched} {outcome.state.value} jobs match")
        if outcome.selection:
            print(
                f"act on exactly these: wheelq jobs bulk {args.topic} {args.bulk_action} "
                f"--selection {outcome.selection}"
            )
    else:
        print(
            f"{outcome.action.value}: acted on {outcome.acted} of {outcome.matched}; "
            f"{outcome.changed} had changed state (left alone); {outcome.skipped} skipped"
        )
    return 0


def list_jobs(ctx: Context) -> int:
    from wheelq.errors import InvalidArgumentError
    from wheelq.web import as_json

    args = ctx.args
    cursor, shown = args.cursor, 0
    with ctx.admin() as admin:
        while True:
            try:
                page = admin.jobs(
                    args.topic, args.state, args.limit, cursor=cursor,
                    due_after=args.due_after, due_before=args.due_before,
                    group=args.group, reason=args.reason, priority=args.priority,
                    key=args.key,
                )  # fmt: skip
            except InvalidArgumentError as exc:
                raise usage_error(f"--{exc.parameter.replace('_', '-')}: {exc}") from exc
            for row in page:
                if args.json:
                    print(json.dumps(as_json(row), sort_keys=True, allow_nan=False))
                else:
                    print(_row(row))
            shown += len(page)
            cursor = page.next
            if cursor is None or not args.all:
                break
    if cursor is not None:
        print(f"next page: --cursor {cursor}", file=sys.stderr)
    elif not shown:
        print(f"no {args.state} jobs on {args.topic}", file=sys.stderr)
    return 0


def _row(row: Any) -> str:
    """One listed job on a line: id, when, attempt, who, and what is known of its payload."""
    parts = [row.id or "-", utc_text(row.due_ms)]
    if row.attempt is not None:
        parts.append(f"attempt={row.attempt}/{row.max_attempts}")
    if row.group:
        parts.append(f"group={row.group}")
    if row.priority is not None:
        parts.append(f"priority={row.priority}")
    if row.waiting:
        parts.append("waiting")  # on the due line: due, its turn to enter the stream next
    if row.consumer:
        parts.append(f"consumer={row.consumer} deliveries={row.deliveries}")
        if row.started_ms is not None:
            parts.append(f"started={utc_text(row.started_ms)}")
        elif row.read_ahead:
            parts.append("read-ahead")
    if row.reason:
        parts.append(f"reason={row.reason}")
    if row.error:
        parts.append(_first_line(row.error))
    parts.append(row.preview if row.preview is not None else f"({row.payload_bytes} bytes)")
    return "  ".join(parts)


def children(ctx: Context) -> int:
    """Each child of a flow as ``wheelq job`` shows a job, one JSON line each."""
    from wheelq.web import as_json

    with ctx.client() as client:
        found = client.children(ctx.args.topic, ctx.args.job_id)
    for info in found:
        print(json.dumps(as_json(info), sort_keys=True))
    return 0
