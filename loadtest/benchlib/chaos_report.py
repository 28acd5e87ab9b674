"""The chaos soak's account: what every process recorded, set against every key, and the
lateness around each fault.

`collect` reads the producers' and workers' record files and the topic's keys (fired
entries, pending ids, dead letters) and reconciles them (`wheelq.testing.reconcile`).
`by_fault` measures, for each fault, the lateness spike of the jobs due while it held
and how long after it began the last job more than `LATE_MS` late was due (its recovery);
`timeline` gives lateness per second for the plot. `failures` judges the run.
"""

from __future__ import annotations

import asyncio
import bisect
import signal
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchlib.chaos_faults import Event
from benchlib.chaos_roles import read_log
from wheelq.core.job import Field
from wheelq.core.keys import all_shards, shard_of
from wheelq.testing import Fired, percentile, read_fired, reconcile
from wheelq.testing.reconcile import MUST_BE_ZERO, Reconciliation

LATE_MS = 100
"""A job fired more than this late counts as hit by a fault (the recovery's end)."""
SETTLE_MS = 2000
"""Jobs due up to this long after a fault ended still count towards its spike."""


def _ids(out: Path, prefix: str) -> list[str]:
    return [line for path in sorted(out.glob(f"{prefix}-*.log")) for line in read_log(path)]


def handled(out: Path) -> Counter[str]:
    """Job id -> handler runs, from every worker's record."""
    return Counter(line.split(" ", 1)[0] for line in _ids(out, "runs"))


def collect(
    target: Any, topic: str, shards: int, out: Path, max_runs: int
) -> tuple[Reconciliation, list[Fired]]:
    """Every acknowledged id against what the keys and the handlers show."""
    fired = asyncio.run(_read_fired(target, topic, shards))
    conn = target.connect()
    pending: list[str] = []
    dead: list[str] = []
    for keys in all_shards(topic, shards):
        pending += [m.decode() for m in conn.zrange(keys.delayed, 0, -1)]
        for _, fields in conn.xrange(keys.dead):
            dead.append(fields[Field.ID].decode())
    account = reconcile(
        _ids(out, "acked"),
        fired,
        pending=pending,
        cancelled=_ids(out, "cancelled"),
        dead=dead,
        handled=handled(out),
        max_runs=max_runs,
    )
    return account, fired


async def _read_fired(target: Any, topic: str, shards: int) -> list[Fired]:
    connection = target.connect_async()
    try:
        return await read_fired(connection, topic, shards)
    finally:
        await connection.aclose()


def failures(
    account: Reconciliation, settled: bool, deaths: Mapping[str, Sequence[int]]
) -> list[str]:
    """Why the run failed, one line a reason; empty when it passed. It fails on a broken
    promise of the account (`MUST_BE_ZERO`), a run that did not settle, and any process
    that ended without being told to (`deaths`: name -> its return codes; -N is signal N),
    since the faults cover the deaths they cause."""
    out = [f"{name}: {getattr(account, name)}" for name in MUST_BE_ZERO if getattr(account, name)]
    if not settled:
        out.append("did not settle: jobs still pending, unread or unacked")
    out += [
        f"{name} died unexpectedly ({', '.join(_end(code) for code in codes)})"
        for name, codes in sorted(deaths.items())
        if codes
    ]
    return out


def _end(code: int) -> str:
    if code < 0:
        try:
            return f"{signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit {code}"


def timeline(fired: Sequence[Fired], start_ms: int) -> list[dict[str, Any]]:
    """Per second of due time since `start_ms`: jobs, lateness p99 and max (ms)."""
    seconds: dict[int, list[int]] = {}
    for record in fired:
        if record.attempt == 1:
            seconds.setdefault((record.due_ms - start_ms) // 1000, []).append(record.lateness_ms)
    out = []
    for second in sorted(seconds):
        values = sorted(seconds[second])
        out.append(
            {"s": second, "jobs": len(values), "p99": percentile(values, 99), "max": values[-1]}
        )
    return out


def by_fault(fired: Sequence[Fired], events: Sequence[Event], shards: int) -> dict[str, Any]:
    """Per fault event and per fault class (over the faults injected alone, when there were
    some): the lateness spike and the recovery time; for a node's kill, the longest gap in a
    shard's stream across it (the dead node's shards wait for their next leader)."""
    firsts = sorted((r.due_ms, r.lateness_ms) for r in fired if r.attempt == 1)
    dues = [d for d, _ in firsts]
    entries: dict[int, list[int]] = {}
    for record in fired:
        entries.setdefault(shard_of(record.job_id, shards), []).append(record.entry_ms)
    for times in entries.values():
        times.sort()
    per_event = []
    ordered = sorted(events, key=lambda e: e.start_ms)
    for i, event in enumerate(ordered):
        upto = ordered[i + 1].start_ms if i + 1 < len(ordered) else event.end_ms + 30_000
        lo, hi = _bisect(dues, event.start_ms), _bisect(dues, upto)
        window = firsts[lo:hi]
        held = [late for due, late in window if due <= event.end_ms + SETTLE_MS]
        late_dues = [due for due, late in window if late > LATE_MS]
        per_event.append(
            {
                "fault": event.fault,
                "paired": event.paired,
                "start_ms": event.start_ms,
                "held_ms": event.end_ms - event.start_ms,
                "jobs_due": len(held),
                "spike_ms": max(held, default=0),
                "recovery_ms": (late_dues[-1] - event.start_ms) if late_dues else 0,
                "detail": event.detail,
            }
        )
        if event.fault == "node_kill" and "not_applied" not in event.detail:
            per_event[-1]["stream_gap_ms"] = _widest_gap(entries, event.start_ms)
    classes: dict[str, list[dict[str, Any]]] = {}
    for row in per_event:  # each class by its faults alone; paired ones where it had none
        classes.setdefault(row["fault"], []).append(row)
    for name, rows in classes.items():
        classes[name] = [r for r in rows if not r["paired"]] or rows
    summary = {
        name: {
            "events": len(rows),
            "spike_ms_median": statistics.median(r["spike_ms"] for r in rows),
            "spike_ms_max": max(r["spike_ms"] for r in rows),
            "recovery_ms_median": statistics.median(r["recovery_ms"] for r in rows),
            "recovery_ms_max": max(r["recovery_ms"] for r in rows),
        }
        for name, rows in sorted(classes.items())
    }
    gaps = [r["stream_gap_ms"] for r in per_event if r.get("stream_gap_ms") is not None]
    if gaps and "node_kill" in summary:
        summary["node_kill"] |= {
            "stream_gap_ms_median": statistics.median(gaps),
            "stream_gap_ms_max": max(gaps),
        }
    return {"classes": summary, "events": per_event}


def _kill_gap(event: dict[str, Any], start_ms: int) -> str:
    """One node kill for the report: when, whose, and its stream gap."""
    gap = event["stream_gap_ms"]
    said = f"{gap} ms" if gap is not None else "no shard fired on both sides"
    at_s = (event["start_ms"] - start_ms) / 1000
    return f"{event['detail'].get('target')} at {at_s:.1f} s: {said}"


def _widest_gap(entries: dict[int, list[int]], at_ms: int) -> int | None:
    """The longest span, over the shards, from a shard's last entry before `at_ms` to its
    first one after (None when no shard has entries on both sides)."""
    gaps = []
    for times in entries.values():
        i = bisect.bisect_right(times, at_ms)
        if 0 < i < len(times):
            gaps.append(times[i] - times[i - 1])
    return max(gaps, default=None)


def _bisect(values: list[int], x: int) -> int:
    return bisect.bisect_left(values, x)


def markdown(result: dict[str, Any]) -> str:
    account = result["account"]
    lines = [
        f"# Chaos soak: seed {result['seed']}, {result['minutes']} min, {result['deployment']}",
        "",
        "| acknowledged | fired | cancelled | pending | dead | lost | fired twice | early "
        "| handled never | handled again | handled too often |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        "| "
        + " | ".join(
            str(account[k])
            for k in (
                "acknowledged",
                "fired",
                "cancelled",
                "pending",
                "dead",
                "lost",
                "fired_twice",
                "early",
                "handled_never",
                "handled_again",
                "handled_too_often",
            )
        )
        + " |",
        "",
        "| fault (alone) | events | spike median / max (ms) | recovery median / max (ms) |",
        "|---|---|---|---|",
    ]
    for name, row in result["faults"]["classes"].items():
        lines.append(
            f"| {name} | {row['events']} | {row['spike_ms_median']:.0f} / {row['spike_ms_max']} "
            f"| {row['recovery_ms_median']:.0f} / {row['recovery_ms_max']} |"
        )
    kills = [
        _kill_gap(e, result["start_ms"]) for e in result["faults"]["events"] if "stream_gap_ms" in e
    ]
    if kills:
        lines += [
            "",
            f"Node kills, the widest gap in a shard's stream across each: {'; '.join(kills)}.",
        ]
    lateness = result["lateness_ms"]
    lines += [
        "",
        f"Lateness of first firings (ms): p50 {lateness['p50']}, p99 {lateness['p99']}, "
        f"p99.9 {lateness['p99.9']}, max {lateness['max']}.",
    ]
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], path: Path) -> bool:
    """Lateness per second with the faults marked; False when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    rows = result["timeline"]
    fig, ax = plt.subplots(figsize=(14, 5))
    ax.plot([r["s"] for r in rows], [max(r["max"], 1) for r in rows], lw=0.6, label="max")
    ax.plot([r["s"] for r in rows], [max(r["p99"], 1) for r in rows], lw=0.8, label="p99")
    ax.set_yscale("log")
    start = result["start_ms"]
    names = sorted(result["faults"]["classes"])
    colours = plt.get_cmap("tab20")
    for event in result["faults"]["events"]:
        left = (event["start_ms"] - start) / 1000
        colour = colours(names.index(event["fault"]) % 20)
        ax.axvspan(left, left + max(event["held_ms"], 200) / 1000, color=colour, alpha=0.3)
        ax.text(left, 1, event["fault"], rotation=90, fontsize=6, va="bottom")
    ax.set_xlabel("due time (s since start)")
    ax.set_ylabel("fired - due (ms, log)")
    ax.set_title(f"wheelq chaos soak, seed {result['seed']}: lateness with faults marked")
    ax.legend(loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
