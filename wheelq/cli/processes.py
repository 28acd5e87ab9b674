"""`wheelq ps`: the live processes (scheduler nodes, workers, services, relays) with what
each is doing, as their heartbeats last said (docs/architecture.md, "Processes")."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from wheelq.cli.context import Context

if TYPE_CHECKING:
    from wheelq.core.process import ProcessInfo

COLUMNS = (
    "PROCESS",
    "ROLE",
    "TOPICS",
    "GROUPS",
    "SLOTS",
    "IN_FLIGHT",
    "HANDLED",
    "FAILED",
    "LEADS",
    "OLDEST_LEASE",
    "VERSION",
    "UP",
    "BEAT",
)
MAX_NAMES_SHOWN = 3
"""Topics or groups a row names before it says how many more."""


def register(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "ps",
        parents=parents,
        help="the live processes: scheduler nodes, workers, services, relays, and what each "
        "is doing",
    )
    p.add_argument("--topic", help="only the processes serving this topic")
    p.add_argument("--json", action="store_true", help="one JSON object per process and line")
    p.set_defaults(func=ps)


def ps(ctx: Context) -> int:
    """Print a row per live process (``--json``: an object per line); "no processes" on
    stderr when there is none."""
    from wheelq.web import as_json

    with ctx.admin() as admin:
        found = admin.processes()
    if ctx.args.topic is not None:
        found = [p for p in found if ctx.args.topic in p.topics]
    if ctx.args.json:
        for p in found:
            print(json.dumps(as_json(p), allow_nan=False))
        return 0
    if not found:
        print("no processes", file=sys.stderr)
        return 0
    rows = [row(p) for p in found]
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(COLUMNS)]
    print("  ".join(c.ljust(w) for c, w in zip(COLUMNS, widths, strict=True)).rstrip())
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
    return 0


def row(p: ProcessInfo) -> list[str]:
    """One process's cells, as `COLUMNS` names them."""
    oldest = max((lead.lease_age_ms for lead in p.leads), default=None)
    return [
        f"{p.host}:{p.pid}",
        p.role or "-",
        names(p.topics),
        names(p.groups),
        "-" if p.concurrency is None else str(p.concurrency),
        str(p.in_flight),
        str(p.handled),
        str(p.failed),
        str(p.leads_total) if p.leads_total else "-",
        "-" if oldest is None else duration(oldest),
        p.version,
        duration(p.up_ms),
        duration(p.beat_age_ms),
    ]


def names(values: tuple[str, ...]) -> str:
    if not values:
        return "-"
    shown = ",".join(values[:MAX_NAMES_SHOWN])
    more = len(values) - MAX_NAMES_SHOWN
    return f"{shown},+{more}" if more > 0 else shown


def duration(ms: int) -> str:
    """``850ms``, ``4.2s``, ``12m``, ``3h``, ``2d``."""
    if ms < 1000:
        return f"{ms}ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f}s"
    if ms < 3_600_000:
        return f"{ms // 60_000}m"
    if ms < 86_400_000:
        return f"{ms // 3_600_000}h"
    return f"{ms // 86_400_000}d"


def summary(found: list[ProcessInfo]) -> str:
    """``3 processes: 1 scheduler, 2 worker`` (each role counted once per process running it)."""
    from wheelq.core.process import ROLES

    counts = {role: sum(1 for p in found if any(r.role == role for r in p.roles)) for role in ROLES}
    each = ", ".join(f"{n} {role}" for role, n in counts.items() if n)
    noun = "process" if len(found) == 1 else "processes"
    return f"{len(found)} {noun}" + (f": {each}" if each else "")
