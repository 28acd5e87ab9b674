"""`wheelq schedule add|list|show|pause|resume|remove`: recurring schedules from a shell."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING, Any, cast

from wheelq.cli.context import CliError, Context, command
from wheelq.cli.jobs import given_flags, json_payload, option_flags
from wheelq.cli.jobs import when as parse_when
from wheelq.core.due import utc_text
from wheelq.core.options import RUN
from wheelq.web import schedule_json

if TYPE_CHECKING:
    from wheelq.core.options import RunOptions
    from wheelq.core.recurring import Schedule


def register(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("schedule", help="define, list, pause, resume or remove recurring jobs")
    actions = p.add_subparsers(
        dest="action", required=True, metavar="{add,list,show,pause,resume,remove}"
    )
    a = actions.add_parser("add", parents=parents, help="create or update a schedule")
    a.add_argument("name", help="1-100 characters from [A-Za-z0-9_.:-], unique in the topic")
    a.add_argument("topic")
    a.add_argument(
        "payload", nargs="?", default="null", help="JSON every run carries (default null); - stdin"
    )
    rule = a.add_mutually_exclusive_group(required=True)
    rule.add_argument("--cron", help="five cron fields, read in --tz ('30 2 * * *')")
    rule.add_argument(
        "--every", type=float, help="an interval in seconds (0.1 s to 366 days; 1.5: 1500 ms)"
    )
    rule.add_argument("--every-ms", type=int, help="the interval in ms (an alias of --every)")
    a.add_argument("--tz", help="IANA zone the cron is read in (default UTC)")
    when = "epoch seconds, or ISO 8601 with an offset; at most ten years from now"
    a.add_argument("--start", type=parse_when, help=f"no run before this: {when}")
    a.add_argument("--end", type=parse_when, help=f"no run after this: {when}")
    a.add_argument(
        "--misfire",
        choices=("once", "all", "skip"),
        help="runs missed while no scheduler ran: the latest once (default), all, or none",
    )
    a.add_argument("--max-catch-up", type=int, help="most missed runs run with 'all' (100)")
    a.add_argument("--max-attempts", type=int, help="runs before each is dead-lettered")
    a.add_argument("--callback", help="URL each run is POSTed to (see 'wheelq deliver')")
    option_flags(a, RUN)  # then each option of the runs the table gives a flag: --key, ...
    a.set_defaults(func=add)

    listing = command(actions, "list", parents, "every schedule, by topic, name", list_schedules)
    listing.add_argument("--topic", help="only this topic's")
    listing.add_argument("--json", action="store_true", help="print a JSON list")

    for action, verb in (
        ("show", "print one schedule as JSON"),
        ("pause", "stop its runs (those written ahead are cancelled)"),
        ("resume", "run again from now (runs missed while paused are skipped)"),
        ("remove", "delete it and cancel its runs written ahead"),
    ):
        func = show if action == "show" else change
        command(actions, action, parents, verb, func, "name", "topic")


_OPTIONS = (
    "cron", "every", "every_ms", "tz", "start", "end", "misfire", "max_catch_up", "max_attempts",
    "callback",
)  # fmt: skip


def add(ctx: Context) -> int:
    args = ctx.args
    payload = json_payload(args.payload)
    given = {key: getattr(args, key) for key in _OPTIONS}
    options = {key: value for key, value in given.items() if value is not None}
    options.update(given_flags(args, RUN))
    with ctx.admin() as admin:
        existed = admin.get_schedule(args.name, args.topic) is not None
        schedule = admin.schedule(args.name, args.topic, payload, **cast("RunOptions", options))
    verb = "updated" if existed else "created"
    after = _next_run(schedule)
    state = "paused" if schedule.paused else "no runs left" if after is None else "next run"
    when = "" if after is None else f" {_iso(after)}"
    print(f"{verb} {schedule.name} on {schedule.topic}: {schedule.rule.describe()}, {state}{when}")
    return 0


def list_schedules(ctx: Context) -> int:
    """Print a table of schedules (or a JSON list); "no schedules" on stderr when none."""
    with ctx.admin() as admin:
        found = admin.schedules(ctx.args.topic)
    now = _now_ms()
    if ctx.args.json:
        print(json.dumps([schedule_json(s, now) for s in found], indent=2, sort_keys=True))
    elif found:
        head = ("NAME", "TOPIC", "RULE", "TZ", "MISFIRE", "STATE", "NEXT_RUN")
        rows = [head] + [
            (s.name, s.topic, s.rule.describe(tz=False), s.rule.tz, s.misfire,
             _state(s), _iso(_next_run(s, now)))
            for s in found
        ]  # fmt: skip
        widths = [max(len(row[i]) for row in rows) for i in range(len(head) - 1)]
        for row in rows:
            cells = [f"{v:<{w}}" for v, w in zip(row, widths, strict=False)]
            print("  ".join([*cells, row[-1]]))
    for s in found:
        if s.error is not None:
            print(f"schedule {s.name} of {s.topic} cannot be read: {s.error}", file=sys.stderr)
    if not found:
        print("no schedules" + (f" on {ctx.args.topic}" if ctx.args.topic else ""), file=sys.stderr)
    return 0


def _state(s: Schedule) -> str:
    return "unreadable" if s.error is not None else "paused" if s.paused else "active"


def show(ctx: Context) -> int:
    with ctx.admin() as admin:
        found = admin.get_schedule(ctx.args.name, ctx.args.topic)
    if found is None:
        raise _missing(ctx)
    print(json.dumps(schedule_json(found, _now_ms()), indent=2, sort_keys=True))
    return 0


def change(ctx: Context) -> int:
    args = ctx.args
    with ctx.admin() as admin:
        call, done = {
            "pause": (admin.pause_schedule, "paused"),
            "resume": (admin.resume_schedule, "resumed"),
            "remove": (admin.unschedule, "removed"),
        }[args.action]
        if not call(args.name, args.topic):
            raise _missing(ctx)
    print(f"{done} {args.name}")
    return 0


def _missing(ctx: Context) -> CliError:
    return CliError(f"no schedule {ctx.args.name} on topic {ctx.args.topic}")


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _next_run(s: Schedule, now_ms: int | None = None) -> int | None:
    """When it next fires (None while paused or once it has ended)."""
    return s.next_run_ms(_now_ms() if now_ms is None else now_ms)


def _iso(ms: int | None) -> str:
    """UTC ISO 8601, to the second when whole (any int: one past year 9999 reads as its ms)."""
    return utc_text(ms).replace(".000Z", "Z")
