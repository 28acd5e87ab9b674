"""`wheelq stats` (a table per topic and shard) and `wheelq top` (every topic, live, with
rates from one frame to the next; handled/s is per group, as every group handles every job).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from typing import TYPE_CHECKING, Any

from wheelq.cli.context import (
    CliError,
    Context,
    cannot_read,
    no_such_topic,
    split_topics,
    usage_error,
)

if TYPE_CHECKING:
    from rich.console import Console, Group
    from rich.table import Table

    from wheelq.admin.admin import Admin
    from wheelq.core.line import LineView
    from wheelq.core.observe import ShardObservation, TopicRow
    from wheelq.core.pause import PauseState
    from wheelq.core.process import ProcessInfo

INTERVAL_RANGE_S = (0.1, 3600.0)


def register(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "stats", parents=parents, help="pending, ready, in flight and dead per topic and shard"
    )
    p.add_argument("topic", nargs="?")
    p.add_argument("--json", action="store_true", help="one JSON object per shard and line")
    p.set_defaults(func=stats)

    p = sub.add_parser("top", parents=parents, help="every topic, live: rates, backlog, lateness")
    p.add_argument("--topics", help="comma-separated topics to show (default: every topic)")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between frames (default 1)")
    p.add_argument("--once", action="store_true", help="print one frame after one interval")
    p.set_defaults(func=top)


def observe(admin: Admin, topics: list[str]) -> tuple[list[ShardObservation], dict[str, str]]:
    """What every shard of `topics` holds, read in one round, and the topics Redis cannot
    read (a key of the wrong type), each with `cannot_read`'s line: when the round fails,
    each topic is read on its own, so one such topic hides none of the others (the
    console's topic list does the same)."""
    from redis.exceptions import ResponseError

    from wheelq.core.keys import all_shards
    from wheelq.store import server
    from wheelq.store.executor import SyncExecutor, drive
    from wheelq.store.observe import observe_shards

    registry = admin.topics()
    names = [t for t in topics if t in registry]
    executor = SyncExecutor(admin.redis)
    (now_ms,) = executor.run([server.server_time()])

    def read(some: list[str]) -> list[ShardObservation]:
        shards = [keys for t in some for keys in all_shards(t, registry[t])]
        return drive(
            observe_shards(shards, int(now_ms)),
            lambda calls: executor.run(calls, return_exceptions=True),
        )

    try:
        return read(names), {}
    except ResponseError:
        pass
    found: list[ShardObservation] = []
    unreadable: dict[str, str] = {}
    for topic in names:
        try:
            found.extend(read([topic]))
        except ResponseError as exc:
            unreadable[topic] = cannot_read(topic, exc)
    return found, unreadable


def lines(admin: Admin, topics: list[str]) -> list[LineView]:
    """The due line of each of `topics` that Redis can read (`wheelq.store.line`), one
    round of bounded calls for them all."""
    from wheelq.core.keys import all_shards
    from wheelq.core.line import line_of
    from wheelq.store import server
    from wheelq.store.executor import SyncExecutor, drive
    from wheelq.store.line import read_lines

    registry = admin.topics()
    names = [t for t in topics if t in registry]
    if not names:
        return []
    executor = SyncExecutor(admin.redis)
    (now,) = executor.run([server.server_time()])
    now_ms = int(now)
    shards = [keys for t in names for keys in all_shards(t, registry[t])]
    found = drive(read_lines(shards, now_ms), executor.run)
    return [line_of(t, now_ms, [s for s in found if s.topic == t]) for t in names]


def say_unreadable(unreadable: dict[str, str]) -> None:
    for said in unreadable.values():
        print(said, file=sys.stderr)


def pause_states(admin: Admin, found: list[ShardObservation]) -> dict[str, PauseState]:
    """What is paused of each topic in `found` (its groups as observed), one round trip."""
    from wheelq.store import pauses
    from wheelq.store.executor import SyncExecutor

    groups: dict[str, set[str]] = {}
    for o in found:
        groups.setdefault(o.topic, set()).update(g.name for g in o.groups)
    if not groups:
        return {}
    calls = [pauses.read_pause_state(topic, names) for topic, names in groups.items()]
    return dict(zip(groups, SyncExecutor(admin.redis).run(calls), strict=True))


def stats(ctx: Context) -> int:
    """Print a table per topic, a row per shard; exit 1 for an unknown topic, or for the
    one asked for when it cannot be read (every topic: one that cannot be read is said on
    stderr, the others printed)."""
    with ctx.admin() as admin:
        names = sorted(admin.topics())
        if ctx.args.topic and ctx.args.topic not in names:
            raise no_such_topic(ctx.args.topic, names)
        found, unreadable = observe(admin, [ctx.args.topic] if ctx.args.topic else names)
    if ctx.args.topic and unreadable:
        raise CliError(unreadable[ctx.args.topic])
    if ctx.args.json:
        for o in found:
            print(json.dumps(_shard_dict(o)))
    elif found:
        console = _console()
        for topic in dict.fromkeys(o.topic for o in found):
            console.print(_stats_table(topic, [o for o in found if o.topic == topic]))
    elif not unreadable:
        print("no topics", file=sys.stderr)
    say_unreadable(unreadable)
    return 0


def _shard_dict(o: ShardObservation) -> dict[str, Any]:
    return {
        "topic": o.topic,
        "shard": o.shard,
        "pending": o.pending,
        "ready": o.ready,
        "in_flight": o.in_flight,
        "oldest_in_flight_ms": o.oldest_age_ms(),
        "dead": o.dead,
        "fired": o.entries_added,
        "in_stream": o.length,
        "expired": o.expired,
        "waiting": o.waiting,
    }


def _stats_table(topic: str, shards: list[ShardObservation]) -> Table:
    from rich.table import Table

    table = Table(title=topic, title_justify="left")
    columns = ("shard", "pending", "ready", "in flight", "oldest", "dead", "fired", "in stream")
    for name in (*columns, "expired", "waiting"):
        table.add_column(name, justify="right")
    rows = [_shard_dict(o) for o in shards]
    ages = [r["oldest_in_flight_ms"] for r in rows if r["oldest_in_flight_ms"] is not None]
    total = {k: sum(r[k] for r in rows) for k in _COUNTS}
    total.update(shard="all", oldest_in_flight_ms=max(ages) if ages else None)
    for r in rows:
        table.add_row(*_stats_cells(r))
    table.add_section()
    table.add_row(*_stats_cells(total))
    return table


_COUNTS = ("pending", "ready", "in_flight", "dead", "fired", "in_stream", "expired", "waiting")
"""The counts of a row (`ready` includes `waiting`: due, on the due line)."""


def _stats_cells(r: dict[str, Any]) -> list[str]:
    counts = [f"{r[k]:,}" for k in _COUNTS]
    return [str(r["shard"]), *counts[:3], _age(r["oldest_in_flight_ms"]), *counts[3:]]


def top(ctx: Context) -> int:
    """Refresh a table of every topic each ``--interval`` until Ctrl-C (``--once``: one)."""
    from rich.console import Group
    from rich.live import Live

    from wheelq.core.observe import by_shard, topic_rows

    interval = ctx.args.interval
    low, high = INTERVAL_RANGE_S
    if not (isinstance(interval, float) and low <= interval <= high):
        raise usage_error(f"--interval must be seconds in [{low}, {high}], got {interval}")
    wanted = None if ctx.args.topics is None else split_topics(ctx.args.topics, "--topics")
    console = _console()
    with ctx.admin() as admin:
        unreadable: dict[str, str] = {}

        def frame() -> list[ShardObservation]:
            names = sorted(admin.topics()) if wanted is None else wanted
            found, unreadable_now = observe(admin, names)
            unreadable.clear()
            unreadable.update(unreadable_now)
            return found

        def table(now: list[ShardObservation], before: Any) -> Group:
            rows = topic_rows(now, before)
            found = admin.processes()
            main = _top_table(rows, interval, pause_states(admin, now), unreadable, found)
            readable = [r.topic for r in rows if r.topic not in unreadable]
            return Group(main, *_line_tables(lines(admin, readable)))

        previous = by_shard(frame())
        if ctx.args.once:
            time.sleep(interval)
            console.print(table(frame(), previous))
            return 0
        try:
            with Live(console=console, auto_refresh=False, screen=False) as live:
                while True:
                    time.sleep(interval)
                    now = frame()
                    live.update(table(now, previous), refresh=True)
                    previous = by_shard(now)
        except KeyboardInterrupt:
            return 0


def _top_table(
    rows: list[TopicRow],
    interval_s: float,
    paused: dict[str, PauseState] | None = None,
    unreadable: dict[str, str] | None = None,
    processes: list[ProcessInfo] | None = None,
) -> Table:
    """The frame's table; topics Redis cannot read (`unreadable`) in its caption, and the
    live `processes` counted by role in its title (`wheelq ps` lists them)."""
    from rich.table import Table

    from wheelq.cli.processes import summary

    live = "" if processes is None else f"  {summary(processes)} (wheelq ps)"
    table = Table(
        title=f"wheelq top  (every {interval_s:g} s; Ctrl-C to quit){live}", title_justify="left"
    )
    table.add_column("topic", no_wrap=True)
    columns = "due/s,fired/s,handled/s by group,pending,ready,in flight,oldest,dead"
    for name in [*columns.split(","), "late p50", "late p99"]:
        table.add_column(name, justify="right")
    for r in rows:
        table.add_row(
            r.topic,
            _rate(r.due_per_s),
            _rate(r.fired_per_s),
            _group_rates(r.handled_per_s_by_group, (paused or {}).get(r.topic)),
            f"{r.pending:,}",
            f"{r.ready:,}",
            f"{r.in_flight:,}",
            _age(r.oldest_in_flight_ms),
            f"{r.dead:,}",
            _ms(r.lateness_p50_ms),
            _ms(r.lateness_p99_ms),
        )
    if unreadable:
        table.caption = "; ".join(unreadable.values())
    elif not rows:
        table.caption = "no topics"
    return table


def _line_tables(views: list[LineView]) -> list[Table]:
    """The topics with jobs on their due line (none: no table): how many wait, the backlog
    by priority of those read from the lanes' heads, and the keys furthest behind."""
    from rich.table import Table

    shown = [v for v in views if v.waiting]
    if not shown:
        return []
    table = Table(title="on the due line (GET /v1/topics/<topic>/line)", title_justify="left")
    table.add_column("topic", no_wrap=True)
    for name in ("waiting", "lanes", "by priority (read)"):
        table.add_column(name, justify="right")
    table.add_column("keys furthest behind", no_wrap=True)
    for v in shown:
        priorities = "\n".join(f"p{p} {n:,}" for p, n in v.by_priority.items())
        behind = "\n".join(
            f"{'(shared lane)' if lane.key is None else lane.key}  {lane.waiting:,} "
            f"waiting, {_age(v.behind_ms(lane))} behind"
            for lane in v.behind
        )
        table.add_row(
            v.topic,
            f"{v.waiting:,}",
            f"{v.lanes:,}",
            f"{priorities or '-'}\nof {v.sampled:,}",
            behind or "-",
        )
    return [table]


def _console() -> Console:
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=200)


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _group_rates(
    rates: tuple[tuple[str, float | None], ...] | None, paused: PauseState | None = None
) -> str:
    """One line per group, ``name rate`` and ``(paused)`` (a topic no group reads yet: -)."""
    if not rates:
        return "-"

    def mark(name: str) -> str:
        return " (paused)" if paused is not None and paused.group_paused(name) else ""

    return "\n".join(f"{name} {_rate(value)}{mark(name)}" for name, value in rates)


def _ms(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:,.0f} ms"


def _age(ms: int | None) -> str:
    if ms is None:
        return "-"
    return f"{ms} ms" if ms < 10_000 else f"{ms / 1000:,.0f} s"
