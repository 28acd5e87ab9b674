"""`wheelq events` (follow a topic's job events, like ``tail -f``) and `wheelq topics events`
(turn them on or off)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
from typing import TYPE_CHECKING, Any

from wheelq.cli.context import Context, command, no_such_topic

if TYPE_CHECKING:
    from wheelq.core.events import Event


def register(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "events", parents=parents, help="follow a topic's job events as they happen (Ctrl-C quits)"
    )
    p.add_argument("topic")
    since = (
        "now (the default): what happens from now on; start: every event the streams hold; "
        "or a position printed before: the events after it. Events are in time order per "
        "shard (a job's events are all in its shard), not across shards"
    )
    p.add_argument("--since", default="now", help=since)
    p.add_argument("--json", action="store_true", help="one JSON object per event and line")
    p.add_argument("--count", type=int, help="exit after this many events")
    p.set_defaults(func=follow)


def register_setting(actions: Any, parents: list[argparse.ArgumentParser]) -> None:
    """`wheelq topics events T --on|--off`, under `wheelq topics`."""
    help_ = "show, or turn on (--on) or off (--off), a topic's job events"
    p = command(actions, "events", parents, help_, setting, "name")
    switch = p.add_mutually_exclusive_group()
    switch.add_argument("--on", action="store_true", help="keep events of its jobs")
    switch.add_argument("--off", action="store_true", help="keep none")
    p.add_argument("--max-len", type=int, help="events kept per shard (default 100,000)")
    p.add_argument("--max-age-ms", type=int, help="events kept this long (default a day)")


def setting(ctx: Context) -> int:
    args = ctx.args
    with ctx.admin() as admin:
        if not args.on and args.name not in (names := admin.topics()):
            # showing or turning off needs the topic; --on creates it, as set_events does
            raise no_such_topic(args.name, sorted(names))
        config = admin.events_config(args.name)
        if args.on or args.off or args.max_len is not None or args.max_age_ms is not None:
            config = admin.set_events(
                args.name,
                not args.off,
                max_len=config.max_len if args.max_len is None else args.max_len,
                max_age_ms=config.max_age_ms if args.max_age_ms is None else args.max_age_ms,
            )
    state = "on" if config.enabled else "off"
    print(f"{args.name}: events {state}, max_len={config.max_len}, max_age_ms={config.max_age_ms}")
    return 0


def follow(ctx: Context) -> int:
    """Print each event until Ctrl-C (or ``--count``); exit 1 for an unknown topic (said as
    every command says it) and for one whose events are off (it would wait for ever)."""
    from wheelq.admin.async_admin import AsyncAdmin
    from wheelq.errors import UnknownTopicError

    args = ctx.args
    url, settings = ctx.redis_url(), ctx.section("client")

    async def run() -> None:
        async with AsyncAdmin.from_url(url, **settings) as admin:
            seen = 0  # events() raises UnknownTopicError or EventsOffError (exit 1)
            try:
                async with contextlib.aclosing(admin.events(args.topic, since=args.since)) as it:
                    async for event in it:
                        print(_line(event, args.json), flush=True)
                        seen += 1
                        if args.count is not None and seen >= args.count:
                            return
            except UnknownTopicError:
                raise no_such_topic(args.topic, sorted(await admin.topics())) from None

    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C: the way out of a follow
        asyncio.run(run())
    return 0


def _line(event: Event, as_json: bool) -> str:
    if as_json:
        from wheelq.web import as_json as wire

        return json.dumps(wire(event), ensure_ascii=False)
    from wheelq.core.due import utc_text

    who = " ".join(
        part
        for part in (
            event.job_id or "",
            f"group {event.group}" if event.group else "",
            f"attempt {event.attempt}" if event.attempt else "",
        )
        if part
    )
    return f"{utc_text(event.at_ms)}  {event.kind:<9}  {who}  @{event.position}"
