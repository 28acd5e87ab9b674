"""`wheelq dlq list|replay|purge`: a topic's dead letters from a shell.

``list --json`` prints one JSON object per line. The payload is JSON too:
spelled as `wheelq.core.payload.jsonable` says (bytes become ``{"$bytes": "<base64>"}``).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from wheelq.cli.context import Context
from wheelq.cli.errors import CliError, usage_error
from wheelq.cli.topics import topic_stats

if TYPE_CHECKING:
    pass

MAX_LISTED = 100_000  # what Client.dead_letters reads at most


def register(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Add ``dlq list``, ``dlq replay`` and ``dlq purge``."""
    p = sub.add_parser("dlq", help="list, replay or purge a topic's dead letters")
    actions = p.add_subparsers(dest="action", required=True, metavar="{list,replay,purge}")
    listing = actions.add_parser("list", parents=parents, help="dead letters, oldest first")
    listing.add_argument("topic")
    listing.add_argument("--limit", type=int, default=100, help="most listed (default 100)")
    listing.add_argument("--offset", type=int, default=0, help="skip this many first")
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    listing.set_defaults(func=list_dead)
    for name, verb in (("replay", "run again (as attempt 1, due now)"), ("purge", "delete")):
        q = actions.add_parser(name, parents=parents, help=f"{verb} dead letters")
        q.add_argument("topic")
        q.add_argument("refs", nargs="*", help="refs (shard/entry-id) from 'wheelq dlq list'")
        q.add_argument("--all", action="store_true", help=f"{name} every dead letter")
        q.set_defaults(func=settle)


def list_dead(ctx: Context) -> int:
    """Print a page of dead letters; "showing a-b of N" goes to stderr when there are more."""
    args = ctx.args
    if args.limit < 1 or args.offset < 0 or args.offset + args.limit > MAX_LISTED:
        raise usage_error(
            f"--limit must be >= 1 and --offset >= 0 with offset + limit <= {MAX_LISTED}, "
            f"got --limit {args.limit} --offset {args.offset}"
        )
    from wheelq.web import as_json

    with ctx.client() as client:
        total = topic_stats(client, args.topic).dead
        rows = client.dead_letters(args.topic, args.offset + args.limit)[args.offset :]
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
    elif args.offset or shown < total:
        more = f"; next page: --offset {shown}" if shown < total else ""
        print(f"showing {args.offset + 1}-{shown} of {total}{more}", file=sys.stderr)
    return 0


def settle(ctx: Context) -> int:
    """Replay or purge the given refs (or --all); exit 1 when some ref was not there."""
    args = ctx.args
    if bool(args.refs) == bool(args.all):
        raise usage_error(
            f"{args.action} needs refs (from 'wheelq dlq list') or --all, "
            + ("not both" if args.all else "got neither")
        )
    with ctx.client() as client:
        topic_stats(client, args.topic)  # exits 1 for an unknown topic
        refs = None if args.all else list(dict.fromkeys(args.refs))
        if args.action == "replay":
            done, verb = client.replay(args.topic, refs), "replayed"
        else:
            done, verb = client.purge_dead(args.topic, refs), "purged"
    print(f"{verb} {done}")
    if refs is not None and done < len(refs):
        missing = len(refs) - done
        why = "" if verb == "purged" else " or are malformed entries that cannot be replayed"
        raise CliError(f"{missing} of {len(refs)} refs were not on {args.topic!r}{why}")
    return 0
