"""`wheelq groups create|list|delete`: a topic's consumer groups from a shell
(`Client.create_group`, `Client.groups`, `Client.delete_group`)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from wheelq.cli.context import Context
from wheelq.cli.errors import CliError
from wheelq.cli.topics import no_such_topic


def register(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Add ``groups create``, ``groups list`` and ``groups delete``."""
    p = sub.add_parser("groups", help="create a topic's consumer group, list them, or delete one")
    actions = p.add_subparsers(dest="action", required=True, metavar="{create,list,delete}")
    create = actions.add_parser(
        "create",
        parents=parents,
        help="create a group on every shard (for pull consumers; a worker creates its own), "
        "refused past the topic's cap of groups",
    )
    create.add_argument("topic")
    create.add_argument("group")
    create.add_argument(
        "--start",
        choices=("earliest", "now"),
        default="earliest",
        help="earliest (default): every job still in the stream; now: jobs fired from now on",
    )
    create.add_argument(
        "--max-groups",
        type=int,
        help="refuse when the topic has this many groups already (default 64, as wheelq "
        "serve's max_groups_per_topic)",
    )
    create.set_defaults(func=create_group)
    listing = actions.add_parser(
        "list",
        parents=parents,
        help="each group: its stream, consumers, entries in flight, ready (not yet delivered "
        "to it) and how long since a consumer of it last read",
    )
    listing.add_argument("topic")
    listing.add_argument("--shards", action="store_true", help="a row per group and shard")
    listing.set_defaults(func=list_groups)
    delete = actions.add_parser(
        "delete",
        parents=parents,
        help="delete a group on every shard (refused while it has entries in flight); stop "
        "its workers first",
    )
    delete.add_argument("topic")
    delete.add_argument("group")
    delete.add_argument(
        "--stream",
        default="ready",
        help="the stream the group reads: ready (default) or callbacks (wheelq serve's)",
    )
    delete.add_argument(
        "--force",
        action="store_true",
        help="delete it even with entries in flight (they are dropped for this group)",
    )
    delete.set_defaults(func=delete_group)


def _idle(ms: int | None) -> str:
    return "-" if ms is None else f"{ms / 1000:.1f}s"


def list_groups(ctx: Context) -> int:
    """Print a table: group, stream, consumers, in flight, ready, idle (per shard with
    ``--shards``); exit 1 for an unknown topic."""
    topic = ctx.args.topic
    with ctx.client() as client:
        found = client.groups(topic)
        if found is None:
            raise no_such_topic(topic, sorted(client.topics()))
    if not found:
        print(f"no consumer groups on {topic}", file=sys.stderr)
        return 0
    width = max(5, *(len(g.name) for g in found))
    shard = "  SHARD" if ctx.args.shards else ""
    print(f"{'GROUP':<{width}}  STREAM   {shard}  CONSUMERS  IN_FLIGHT      READY  IDLE")
    for g in found:
        rows = (
            [(f"  {s.shard:>5}", s.consumers, s.in_flight, s.ready) for s in g.shards]
            if ctx.args.shards
            else [("", g.consumers, g.in_flight, g.ready)]
        )
        for where, consumers, in_flight, ready in rows:
            print(
                f"{g.name:<{width}}  {g.stream:<9}{where}  {consumers:>9}  {in_flight:>9}  "
                f"{ready:>9}  {_idle(g.idle_ms)}"
            )
    return 0


def create_group(ctx: Context) -> int:
    """Create a group (see `Client.create_group`); exit 1 for an unknown topic or past the
    cap."""
    from wheelq.errors import GroupLimitError, GroupNotFoundError

    args = ctx.args
    with ctx.client() as client:
        cap = {} if args.max_groups is None else {"max_groups": args.max_groups}
        try:
            done = client.create_group(args.topic, args.group, start=args.start, **cap)
        except GroupNotFoundError:
            raise no_such_topic(args.topic, sorted(client.topics())) from None
        except GroupLimitError as exc:
            raise CliError(str(exc)) from None
    if not done.created:
        print(f"group {done.name} of {args.topic} exists already")
    else:
        shards = f"{done.shards} shard{'s' if done.shards > 1 else ''}"
        print(f"created group {done.name} of {args.topic} on {shards}")
    return 0


def delete_group(ctx: Context) -> int:
    """Delete a group (see `Client.delete_group`); exit 1 when there is no such group or it
    has entries in flight without ``--force``."""
    from wheelq.errors import GroupBusyError

    args = ctx.args
    with ctx.client() as client:
        try:
            done = client.delete_group(args.topic, args.group, stream=args.stream, force=args.force)
        except GroupBusyError as exc:
            raise CliError(exc.explain("--force")) from None
    dropped = f"; {done.in_flight} entries in flight dropped" if done.in_flight else ""
    shards = f"{done.shards} shard{'s' if done.shards > 1 else ''}"
    print(f"deleted group {done.name} of {args.topic} on {shards}{dropped}")
    return 0
