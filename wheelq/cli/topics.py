"""`wheelq topics` (list, drop): what is on the server (`wheelq stats` is in `top.py`)."""

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
    actions = p.add_subparsers(dest="action", metavar="{list,drop}")
    actions.add_parser(
        "list", parents=parents, help="every topic: shards, pending, ready, dead (the default)"
    ).set_defaults(func=list_topics)
    drop = actions.add_parser(
        "drop", parents=parents, help="delete a topic and all its keys (refused with jobs pending)"
    )
    drop.add_argument("name")
    drop.add_argument("--force", action="store_true", help="drop it even with jobs pending")
    drop.set_defaults(func=drop_topic)


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
    """Print a table: topic, shards, pending, ready, dead."""
    with ctx.client() as client:
        found = every_topic(client)
    if not found:
        print("no topics", file=sys.stderr)
        return 0
    width = max(5, *(len(s.topic) for s in found))
    print(f"{'TOPIC':<{width}}  SHARDS  {'PENDING':>9}  {'READY':>9}  {'DEAD':>9}")
    for s in found:
        print(f"{s.topic:<{width}}  {len(s.shards):>6}  {s.pending:>9}  {s.ready:>9}  {s.dead:>9}")
    return 0


def drop_topic(ctx: Context) -> int:
    """Drop a topic (see `Client.drop_topic`); exit 1 when there is no such topic."""
    with ctx.client() as client:
        if not client.drop_topic(ctx.args.name, force=ctx.args.force):
            raise CliError(f"no such topic {ctx.args.name!r}")
    print(f"dropped {ctx.args.name}")
    return 0
