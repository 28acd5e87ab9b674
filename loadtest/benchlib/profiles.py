"""Where a profiled process spent its time: cProfile's totals by part of the stack (the
driver, wheelq's layers, asyncio, msgpack, waiting), and the functions that took most, per
unit of work (a job, a call)."""

from __future__ import annotations

import cProfile
import pstats
from typing import Any

PARTS = (
    ("psycopg", "psycopg"),
    ("redis/", "redis-py"),
    ("wheelq/store", "wheelq.store"),
    ("wheelq/producer", "wheelq.producer"),
    ("wheelq/outbox", "wheelq.outbox"),
    ("wheelq/core", "wheelq.core"),
    ("wheelq/runtime", "wheelq.runtime"),
    ("asyncio", "asyncio"),
    ("msgpack", "msgpack"),
)
"""(a path fragment, the part it names), first match wins."""


def part_of(file: str, fn: str) -> str:
    """The part of the stack a profiled function belongs to."""
    if "poll" in fn and ("select" in fn or "epoll" in fn):
        return "idle: waiting for the server (epoll)"
    if "_socket.socket" in fn:
        return "socket send / recv (syscalls)"
    for fragment, label in PARTS:
        if fragment in file:
            return label
    return "C builtins (dict, list, isinstance, ...)" if file == "~" else "other"


def profile_report(
    profiler: cProfile.Profile, n: int, top: int, per: str = "job"
) -> dict[str, Any]:
    """`profiler`'s time over `n` units of work (`per`: "job", "call"): the share and µs a
    unit of each part (parts under 1% together), and the `top` functions by own and
    cumulative time."""
    stats = pstats.Stats(profiler)
    entries = stats.stats  # type: ignore[attr-defined]
    total = sum(tt for _, _, tt, _, _ in entries.values()) or 1e-9
    unit = f"us_per_{per}"

    def name(func: tuple[str, int, str]) -> str:
        file, line, fn = func
        short = file.split("site-packages/")[-1].split("/wheelq/")[-1]
        return f"{short}:{line}({fn})"

    def rows_by(index: int) -> list[dict[str, Any]]:
        ordered = sorted(entries.items(), key=lambda kv: -kv[1][index])[:top]
        return [
            {
                "function": name(func),
                "calls": nc,
                f"tottime_{unit}": round(tt / n * 1e6, 2),
                f"cumtime_{unit}": round(ct / n * 1e6, 2),
            }
            for func, (_, nc, tt, ct, _) in ordered
        ]

    groups: dict[str, float] = {}
    for (file, _, fn), (_, _, tt, _, _) in entries.items():
        group = part_of(file, fn)
        groups[group] = groups.get(group, 0.0) + tt
    small = [g for g, t in groups.items() if t < total / 100]
    groups["other (each under 1%)"] = sum(groups.pop(g) for g in small)
    return {
        "profiled_s": round(total, 3),
        per + "s": n,
        "tottime_by_package": {
            g: {"share": round(t / total, 3), unit: round(t / n * 1e6, 2)}
            for g, t in sorted(groups.items(), key=lambda kv: -kv[1])
        },
        "top_tottime": rows_by(2),
        "top_cumtime": rows_by(3),
    }
