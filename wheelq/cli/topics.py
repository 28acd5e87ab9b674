"""`wheelq topics` (list, drop, limits): what is on the server (`wheelq stats` is in `top.py`)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from wheelq.cli.context import Context
from wheelq.cli.errors import CliError

if TYPE_CHECKING:
    from wheelq.producer.client import Client
    from wheelq.producer.operations import TopicStats


def register(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Add the ``topics`` and ``stats`` commands."""
    p = sub.add_parser("topics", parents=parents, help="list topics, or drop one")
    p.set_defaults(func=list_topics)
    actions = p.add_subparsers(dest="action", metavar="{list,drop,limits}")
    actions.add_parser(
        "list",
        parents=parents,
        help="every topic: shards, pending, ready, in flight, in stream, dead (the default)",
    ).set_defaults(func=list_topics)
    drop = actions.add_parser(
        "drop", parents=parents, help="delete a topic and all its keys (refused with jobs pending)"
    )
    drop.add_argument("name")
    drop.add_argument("--force", action="store_true", help="drop it even with jobs pending")
    drop.set_defaults(func=drop_topic)
    limits = actions.add_parser(
        "limits", parents=parents, help="show or set a topic's max_pending / max_ready"
    )
    limits.add_argument("name")
    for flag, what in (
        ("--max-pending", "jobs waiting to fire"),
        ("--max-ready", "fired, unacked"),
    ):
        limits.add_argument(flag, type=_limit, help=f"most {what}; 'none' removes the limit")
    limits.set_defaults(func=topic_limits)


def _limit(text: str) -> int | str:
    if text.lower() == "none":
        return "none"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an int or 'none', got {text!r}") from None


def topic_stats(client: Client, topic: str) -> TopicStats:
    """`client.stats(topic)`, or exit 1 naming the topics there are."""
    found = client.stats(topic)
    if found is None:
        raise no_such_topic(topic, sorted(client.topics()))
    return found


def no_such_topic(topic: str, names: list[str]) -> CliError:
    """The error (exit 1) for an unknown `topic`, naming some of the topics there are."""
    known = f"topics: {', '.join(names[:20])}{' ...' if len(names) > 20 else ''}"
    return CliError(f"no such topic {topic!r} ({known if names else 'there are no topics'})")


def every_topic(client: Client) -> list[TopicStats]:
    """Stats of every topic, by name (a topic dropped while they are read is left out)."""
    return [s for t in sorted(client.topics()) if (s := client.stats(t)) is not None]


def list_topics(ctx: Context) -> int:
    """Print a table: topic, shards, pending, ready (fired, not yet delivered), in flight,
    in stream (not yet trimmed), dead."""
    with ctx.client() as client:
        found = every_topic(client)
    if not found:
        print("no topics", file=sys.stderr)
        return 0
    width = max(5, *(len(s.topic) for s in found))
    columns = ("PENDING", "READY", "IN_FLIGHT", "IN_STREAM", "DEAD")
    print(f"{'TOPIC':<{width}}  SHARDS  " + "  ".join(f"{c:>9}" for c in columns))
    for s in found:
        counts = (s.pending, s.ready, s.in_flight, s.in_stream, s.dead)
        print(f"{s.topic:<{width}}  {len(s.shards):>6}  " + "  ".join(f"{n:>9}" for n in counts))
    return 0


def drop_topic(ctx: Context) -> int:
    """Drop a topic (see `Client.drop_topic`); exit 1 when there is no such topic or it has
    jobs to run without ``--force``."""
    from wheelq.errors import TopicNotEmptyError

    with ctx.client() as client:
        try:
            dropped = client.drop_topic(ctx.args.name, force=ctx.args.force)
        except TopicNotEmptyError as exc:
            raise CliError(exc.explain("add --force")) from None
        if not dropped:
            raise CliError(f"no such topic {ctx.args.name!r}")
    print(f"dropped {ctx.args.name}")
    return 0


def topic_limits(ctx: Context) -> int:
    """Print the topic's limits, after setting the ones given (the others are kept)."""
    args = ctx.args
    with ctx.client() as client:
        limits = client.limits(args.name)
        if args.max_pending is not None or args.max_ready is not None:
            pending = limits.max_pending if args.max_pending is None else args.max_pending
            ready = limits.max_ready if args.max_ready is None else args.max_ready
            limits = client.set_limits(
                args.name,
                max_pending=None if pending == "none" else pending,
                max_ready=None if ready == "none" else ready,
            )
    print(f"{args.name}: max_pending={limits.max_pending}, max_ready={limits.max_ready}")
    return 0
