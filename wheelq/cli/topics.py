"""`wheelq topics` (list, drop, limits, pause, resume, forecast), `wheelq groups` (create,
list, delete) and `wheelq dlq` (list, replay, purge dead letters).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from wheelq.admin.dead_letters import MAX_LIMIT
from wheelq.cli import events
from wheelq.cli.context import (
    CliError,
    Context,
    cannot_read,
    command,
    no_such_topic,
    usage_error,
)
from wheelq.core.far_tier import (
    DEFAULT_HORIZON_MS,
    MAX_HORIZON_MS,
    MIN_HORIZON_MS,
    validate_horizon,
)
from wheelq.core.flow import DEFAULT_CREDIT_MS, MAX_CREDIT_MS, MAX_WEIGHT
from wheelq.core.job import DeadLetter
from wheelq.core.retry import Reason

if TYPE_CHECKING:
    from wheelq.admin.admin import Admin
    from wheelq.producer.operations import TopicStats


def register(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("topics", parents=parents, help="list topics, or drop one")
    p.set_defaults(func=list_topics)
    actions = p.add_subparsers(
        dest="action", metavar="{list,drop,limits,far,pause,resume,forecast,events}"
    )
    actions.add_parser(
        "list",
        parents=parents,
        help="every topic: shards, pending, ready, in flight, in stream, dead (the default; one "
        "that cannot be read is marked unreadable)",
    ).set_defaults(func=list_topics)
    drop_help = "delete a topic and all its keys (refused with jobs pending)"
    drop = command(actions, "drop", parents, drop_help, drop_topic, "name")
    drop.add_argument("--force", action="store_true", help="drop it even with jobs pending")
    limits_help = (
        "show or set a topic's max_pending / max_ready and its due line's priority credit and "
        "fair shares (setting one creates the topic; one not given stays as it is)"
    )
    limits = command(actions, "limits", parents, limits_help, topic_limits, "name")
    for flag, what in (
        ("--max-pending", "jobs waiting to fire"),
        ("--max-ready", "fired, unacked"),
    ):
        limits.add_argument(flag, type=_limit, help=f"most {what}; 'none' removes the limit")
    limits.add_argument(
        "--priority-credit-ms",
        type=int,
        help=f"ms a priority step is worth among due jobs, 0-{MAX_CREDIT_MS:,} "
        f"({DEFAULT_CREDIT_MS:,} until set)",
    )
    limits.add_argument(
        "--fair",
        action=argparse.BooleanOptionalAction,
        help="start due jobs with a key in weighted round robin across keys (--no-fair: in order)",
    )
    weights = limits.add_mutually_exclusive_group()
    weights.add_argument(
        "--fair-weight",
        action="append",
        type=_weight,
        metavar="KEY=W",
        help=f"a key's share of the turns, 1-{MAX_WEIGHT:,} (a key not named: 1); repeat it: the "
        "weights given replace the topic's",
    )
    weights.add_argument(
        "--clear-fair-weights", action="store_true", help="remove every fair weight"
    )
    far_help = (
        "show or set a topic's far horizon: jobs due further ahead are kept compactly until "
        "they come within it (setting it creates the topic)"
    )
    far = command(actions, "far", parents, far_help, topic_far, "name")
    far.add_argument(
        "--horizon-ms",
        type=_horizon,
        help=f"ms: 0 (no far tier) or {MIN_HORIZON_MS:,}-{MAX_HORIZON_MS:,}; 'default' for "
        f"the default ({DEFAULT_HORIZON_MS:,})",
    )
    pause_help = (
        "pause a topic's workers (every group, or --group): running jobs finish, new ones "
        "wait in the stream until resume; firing goes on"
    )
    pause = command(actions, "pause", parents, pause_help, pause_topic, "name")
    pause.add_argument("--group", help="pause only this consumer group")
    resume_help = "resume a topic (and every group paused on its own), or --group"
    resume = command(actions, "resume", parents, resume_help, resume_topic, "name")
    resume.add_argument("--group", help="resume only this consumer group")
    forecast_help = (
        "jobs coming due in the next 10 s, 60 s and 300 s (or --within), overdue and pending "
        "retries included, and the ready work: what to autoscale workers on"
    )
    forecast = command(actions, "forecast", parents, forecast_help, topic_forecast, "name")
    forecast.add_argument(
        "--within",
        help="comma-separated windows, whole seconds from now (1 to 10 windows, each in "
        "[1, 86400]; default 10,60,300)",
    )
    forecast.add_argument("--json", action="store_true", help="one JSON object, as the HTTP API's")
    events.register_setting(actions, parents)


def topic_far(ctx: Context) -> int:
    args = ctx.args
    with ctx.admin() as admin:
        if args.horizon_ms is not None:
            admin.set_far_horizon(
                args.name, None if args.horizon_ms == "default" else args.horizon_ms
            )
        stats = admin.stats(args.name)
        if stats is None:
            raise no_such_topic(args.name, sorted(admin.topics()))
    shown = f"{stats.far_horizon_ms} ms" if stats.far_horizon_ms else "none (0)"
    print(f"{args.name}: far horizon {shown}, {stats.far} of {stats.pending} pending jobs far")
    return 0


def _horizon(text: str) -> int | str:
    from wheelq.errors import InvalidArgumentError

    if text.lower() == "default":
        return "default"
    try:
        return validate_horizon(int(text))
    except (ValueError, InvalidArgumentError) as e:
        raise argparse.ArgumentTypeError(
            f"0, an int in [{MIN_HORIZON_MS}, {MAX_HORIZON_MS}] or 'default', got {text!r:.40}"
        ) from e


def _weight(text: str) -> tuple[str, int]:
    key, eq, weight = text.rpartition("=")
    if not eq or not key or not weight.strip().isdigit():
        raise argparse.ArgumentTypeError(f"expected KEY=WEIGHT (an int), got {text!r:.80}")
    return key, int(weight)


def _limit(text: str) -> int | str:
    if text.lower() == "none":
        return "none"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an int or 'none', got {text!r}") from None


def topic_stats(admin: Admin, topic: str) -> TopicStats:
    found = admin.stats(topic)
    if found is None:
        raise no_such_topic(topic, sorted(admin.topics()))
    return found


@contextmanager
def known_topic(admin: Admin, topic: str) -> Iterator[None]:
    """An unknown topic or group inside, said as every topic subcommand says it, exit 1 (a
    name that is not there, as ``stats`` or ``job`` say; 2 is for a command that cannot
    run): the topic as `no_such_topic`, a group as the library names it."""
    from wheelq.errors import UnknownGroupError, UnknownTopicError

    try:
        yield
    except UnknownTopicError:
        raise no_such_topic(topic, sorted(admin.topics())) from None
    except UnknownGroupError as exc:
        raise CliError(str(exc)) from None


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A topic Redis cannot read (a key of it holds another type): its row and why
    (`cannot_read`)."""

    topic: str
    shards: int
    error: str


def every_topic(admin: Admin) -> list[TopicStats | Unreadable]:
    """Each topic's stats, by name; one whose keys Redis cannot read is `Unreadable`, so it
    hides none of the others (the console's topic list shows it the same way)."""
    from redis.exceptions import ResponseError

    out: list[TopicStats | Unreadable] = []
    for topic, shards in sorted(admin.topics().items()):
        try:
            found = admin.stats(topic)
        except ResponseError as exc:
            out.append(Unreadable(topic, shards, cannot_read(topic, exc)))
            continue
        if found is not None:
            out.append(found)
    return out


def list_topics(ctx: Context) -> int:
    """Print a row per topic; one that cannot be read is a row of "?" marked unreadable,
    and why on stderr (as ``wheelq schedule list`` does)."""
    with ctx.admin() as admin:
        found = every_topic(admin)
    if not found:
        print("no topics", file=sys.stderr)
        return 0
    width = max(5, *(len(s.topic) for s in found))
    columns = ("PENDING", "READY", "IN_FLIGHT", "IN_STREAM", "DEAD")
    print(f"{'TOPIC':<{width}}  SHARDS  " + "  ".join(f"{c:>9}" for c in columns) + "  PAUSED")
    for s in found:
        if isinstance(s, Unreadable):
            shards, counts, paused = s.shards, ("?",) * len(columns), "unreadable"
        else:
            shards, paused = len(s.shards), paused_text(s)
            counts = tuple(str(n) for n in (s.pending, s.ready, s.in_flight, s.in_stream, s.dead))
        print(
            f"{s.topic:<{width}}  {shards:>6}  "
            + "  ".join(f"{n:>9}" for n in counts)
            + f"  {paused}"
        )
    from wheelq.runtime.unled_watch import unled_line

    for s in found:
        if isinstance(s, Unreadable):
            print(s.error, file=sys.stderr)
        elif s.unled:
            unled = [shard.shard for shard in s.shards if shard.unled]
            print("warning: " + unled_line(s.topic, unled), file=sys.stderr)
    return 0


def paused_text(stats: TopicStats) -> str:
    """ "all" (the topic), the groups paused on their own, or "-"."""
    if stats.paused_since_ms is not None:
        return "all"
    return ",".join(stats.paused_groups) or "-"


def pause_topic(ctx: Context) -> int:
    args = ctx.args
    with ctx.admin() as admin, known_topic(admin, args.name):
        state = admin.pause(args.name, args.group)
    what = f"group {args.group} of {args.name}" if args.group else f"{args.name} (every group)"
    since = state.group_since_ms(args.group) if args.group else state.since_ms
    print(f"paused {what} since {_when(since)}: running jobs finish, new ones wait")
    return 0


def resume_topic(ctx: Context) -> int:
    args = ctx.args
    with ctx.admin() as admin, known_topic(admin, args.name):
        state = admin.resume(args.name, args.group)
    what = f"group {args.group} of {args.name}" if args.group else args.name
    left = f"; still paused: {', '.join(state.groups)}" if state.groups else ""
    print(f"resumed {what}{left}")
    return 0


def _when(ms: int | None) -> str:
    from datetime import UTC, datetime

    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def topic_forecast(ctx: Context) -> int:
    """Print the jobs due within each window and the ready work (exit 2 for a bad
    ``--within``, 1 for an unknown topic)."""
    from wheelq.core.forecast import WITHIN_S, within_text
    from wheelq.web import as_json

    args = ctx.args
    windows = WITHIN_S if args.within is None else within_text([args.within])
    with ctx.admin() as admin, known_topic(admin, args.name):
        found = admin.forecast(args.name, windows)
    if args.json:
        print(json.dumps(as_json(found)))
        return 0
    print(f"{'WITHIN':>8}  {'DUE':>9}")
    for within, due in found.due_within.items():
        print(f"{within:>6} s  {due:>9,}")
    print(f"{'ready':>8}  {found.ready:>9,}")
    print(f"{args.name} at {_when(found.at_ms)} (Redis clock)", file=sys.stderr)
    return 0


def drop_topic(ctx: Context) -> int:
    from wheelq.errors import TopicNotEmptyError

    with ctx.admin() as admin:
        try:
            dropped = admin.drop_topic(ctx.args.name, force=ctx.args.force)
        except TopicNotEmptyError as exc:
            raise CliError(exc.explain("add --force")) from None
        if not dropped:
            raise no_such_topic(ctx.args.name, sorted(admin.topics()))
    print(f"dropped {ctx.args.name}")
    return 0


def topic_limits(ctx: Context) -> int:
    args = ctx.args
    settings: dict[str, Any] = {
        name: None if value == "none" else value
        for name, value in (("max_pending", args.max_pending), ("max_ready", args.max_ready))
        if value is not None
    }
    for name in ("priority_credit_ms", "fair"):
        if getattr(args, name) is not None:
            settings[name] = getattr(args, name)
    if args.fair_weight is not None:
        settings["fair_weights"] = dict(args.fair_weight)
    elif args.clear_fair_weights:
        settings["fair_weights"] = {}
    with ctx.admin() as admin:
        if settings:
            limits = admin.set_limits(args.name, **settings)  # creates the topic
        else:
            if args.name not in (names := admin.topics()):
                raise no_such_topic(args.name, sorted(names))
            limits = admin.limits(args.name)
    fair = "on" if limits.fair else "off"
    print(
        f"{args.name}: max_pending={limits.max_pending}, max_ready={limits.max_ready}, "
        f"priority_credit_ms={limits.priority_credit_ms}, fair={fair}"
    )
    if limits.fair_weights:
        print(f"fair_weights={json.dumps(limits.fair_weights, ensure_ascii=False)}")
    return 0


def register_groups(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("groups", help="create a topic's consumer group, list them, or delete one")
    actions = p.add_subparsers(dest="action", required=True, metavar="{create,list,delete}")
    create_help = (
        "create a group on every shard (for pull consumers; a worker creates its own), "
        "refused past the topic's cap of groups"
    )
    create = command(actions, "create", parents, create_help, create_group, "topic", "group")
    start = "earliest (default): every job still in the stream; now: jobs fired from now on"
    create.add_argument("--start", choices=("earliest", "now"), default="earliest", help=start)
    cap = "refuse when the topic has this many groups already (default 64, as wheelq serve's "
    create.add_argument("--max-groups", type=int, help=cap + "max_groups_per_topic)")
    list_help = (
        "each group: its stream, consumers, entries in flight, ready (not yet delivered "
        "to it) and how long since a consumer of it last read"
    )
    listing = command(actions, "list", parents, list_help, list_groups, "topic")
    listing.add_argument("--shards", action="store_true", help="a row per group and shard")
    delete_help = (
        "delete a group on every shard (refused while it has entries in flight); stop "
        "its workers first"
    )
    delete = command(actions, "delete", parents, delete_help, delete_group, "topic", "group")
    stream = "the stream the group reads: ready (default) or callbacks (wheelq serve's)"
    delete.add_argument("--stream", default="ready", help=stream)
    force = "delete it even with entries in flight (they are dropped for this group)"
    delete.add_argument("--force", action="store_true", help=force)


def _shards(n: int) -> str:
    return f"{n} shard{'s' if n > 1 else ''}"


def _idle(ms: int | None) -> str:
    return "-" if ms is None else f"{ms / 1000:.1f}s"


def list_groups(ctx: Context) -> int:
    topic = ctx.args.topic
    with ctx.admin() as admin:
        found = admin.groups(topic)
        if found is None:
            raise no_such_topic(topic, sorted(admin.topics()))
    if not found:
        print(f"no consumer groups on {topic}", file=sys.stderr)
        return 0
    width = max(5, *(len(g.name) for g in found))
    shard = "  SHARD" if ctx.args.shards else ""
    print(f"{'GROUP':<{width}}  STREAM   {shard}  CONSUMERS  IN_FLIGHT      READY  IDLE  PAUSED")
    for g in found:
        rows = (
            [(f"  {s.shard:>5}", s.consumers, s.in_flight, s.ready) for s in g.shards]
            if ctx.args.shards
            else [("", g.consumers, g.in_flight, g.ready)]
        )
        for where, consumers, in_flight, ready in rows:
            print(
                f"{g.name:<{width}}  {g.stream:<9}{where}  {consumers:>9}  {in_flight:>9}  "
                f"{ready:>9}  {_idle(g.idle_ms)}  {'-' if g.paused_since_ms is None else 'yes'}"
            )
    return 0


def create_group(ctx: Context) -> int:
    from wheelq.errors import GroupLimitError, GroupNotFoundError

    args = ctx.args
    with ctx.admin() as admin:
        cap = {} if args.max_groups is None else {"max_groups": args.max_groups}
        try:
            done = admin.create_group(args.topic, args.group, start=args.start, **cap)
        except GroupNotFoundError:
            raise no_such_topic(args.topic, sorted(admin.topics())) from None
        except GroupLimitError as exc:
            raise CliError(str(exc)) from None
    if not done.created:
        print(f"group {done.name} of {args.topic} exists already")
    else:
        print(f"created group {done.name} of {args.topic} on {_shards(done.shards)}")
    return 0


def delete_group(ctx: Context) -> int:
    from wheelq.errors import GroupBusyError, GroupNotFoundError

    args = ctx.args
    with ctx.admin() as admin:
        try:
            done = admin.delete_group(args.topic, args.group, stream=args.stream, force=args.force)
        except GroupBusyError as exc:
            raise CliError(exc.explain("--force")) from None
        except GroupNotFoundError as exc:
            if exc.known is not None:
                raise
            raise no_such_topic(args.topic, sorted(admin.topics())) from None
    dropped = f"; {done.in_flight} entries in flight dropped" if done.in_flight else ""
    print(f"deleted group {done.name} of {args.topic} on {_shards(done.shards)}{dropped}")
    return 0


def register_dlq(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("dlq", help="list, replay or purge a topic's dead letters")
    actions = p.add_subparsers(dest="action", required=True, metavar="{list,replay,purge}")
    listing = command(actions, "list", parents, "dead letters, oldest first", list_dead, "topic")
    listing.add_argument("--limit", type=int, default=100, help="most listed (default 100)")
    listing.add_argument("--offset", type=int, default=0, help="skip this many first")
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    _filter_arguments(listing, "only those")
    for name, verb in (("replay", "run again (as attempt 1, due now)"), ("purge", "delete")):
        q = command(actions, name, parents, f"{verb} dead letters", settle, "topic")
        q.add_argument("refs", nargs="*", help="refs (shard/entry-id) from 'wheelq dlq list'")
        q.add_argument(
            "--all", action="store_true", help=f"{name} every dead letter (or every one matching)"
        )
        _filter_arguments(q, "with --all: only those")


def _filter_arguments(p: argparse.ArgumentParser, which: str) -> None:
    p.add_argument(
        "--reason", choices=[r.value for r in Reason], help=f"{which} dead-lettered for this reason"
    )
    p.add_argument("--group", help=f"{which} of this consumer group")


def _filter(args: argparse.Namespace) -> str:
    """The filter as given on the command line ("" without one)."""
    return " ".join(f"--{k} {v}" for k, v in (("reason", args.reason), ("group", args.group)) if v)


def _first_dead(admin: Admin, args: argparse.Namespace, wanted: int) -> list[DeadLetter]:
    """The first `wanted` dead letters (of the filter), a page at a time: a filtered page ends
    where its scan does (`SCAN_LIMIT`), and the next goes on from there."""
    rows: list[DeadLetter] = []
    after = None
    while True:
        page = admin.dead_letters(
            args.topic, wanted - len(rows), after=after, reason=args.reason, group=args.group
        )
        rows += page
        if page.next is None or len(rows) >= wanted:
            return rows
        after = page.next


def list_dead(ctx: Context) -> int:
    args = ctx.args
    if args.limit < 1 or args.offset < 0 or args.offset + args.limit > MAX_LIMIT:
        raise usage_error(
            f"--limit must be >= 1 and --offset >= 0 with offset + limit <= {MAX_LIMIT}, "
            f"got --limit {args.limit} --offset {args.offset}"
        )
    from wheelq.web import as_json

    with ctx.admin() as admin:
        total = topic_stats(admin, args.topic).dead
        rows = _first_dead(admin, args, args.offset + args.limit)[args.offset :]
    for dead in rows:
        if args.json:
            print(json.dumps(as_json(dead), allow_nan=False))
        else:
            first = dead.error.splitlines()[0] if dead.error else ""
            print(
                f"{dead.ref}  {dead.job_id}  {dead.reason}  group={dead.group}  "
                f"attempt={dead.attempt}/{dead.max_attempts}  {first}"
            )
    shown = args.offset + len(rows)
    if not total:
        print(f"no dead letters on {args.topic}", file=sys.stderr)
    elif _filter(args):
        more = f"; next page: --offset {shown}" if len(rows) == args.limit else ""
        matching = f"matching {_filter(args)} of {total}"
        if rows:
            print(f"showing {args.offset + 1}-{shown} {matching}{more}", file=sys.stderr)
        else:
            print(f"none {matching} past --offset {args.offset}", file=sys.stderr)
    elif args.offset or shown < total:
        more = f"; next page: --offset {shown}" if shown < total else ""
        print(f"showing {args.offset + 1}-{shown} of {total}{more}", file=sys.stderr)
    return 0


def settle(ctx: Context) -> int:
    args = ctx.args
    if bool(args.refs) == bool(args.all):
        raise usage_error(
            f"{args.action} needs refs (from 'wheelq dlq list') or --all, "
            + ("not both" if args.all else "got neither")
        )
    if args.refs and _filter(args):
        raise usage_error(f"{_filter(args)} goes with --all: refs are already chosen")
    match = {"reason": args.reason, "group": args.group}
    with ctx.admin() as admin:
        topic_stats(admin, args.topic)  # exits 1 for an unknown topic
        refs = None if args.all else list(dict.fromkeys(args.refs))
        skipped = 0
        if args.action == "replay":
            replayed = admin.replay(args.topic, refs, **match)
            done, verb, skipped = int(replayed), "replayed", replayed.skipped
        else:
            done, verb = admin.purge_dead(args.topic, refs, **match), "purged"
    print(f"{verb} {done}")
    if skipped:
        print(
            f"{skipped} dead letter{'s' * (skipped > 1)} cannot be replayed (malformed, or "
            "nested past 100 levels) and stay: see them with "
            f"'wheelq dlq list {args.topic} --reason malformed'",
            file=sys.stderr,
        )
    if refs is not None and done + skipped < len(refs):
        missing = len(refs) - done - skipped
        why = "" if verb == "purged" else " or are held back by its max_ready"
        raise CliError(f"{missing} of {len(refs)} refs were not on {args.topic!r}{why}")
    return 0
