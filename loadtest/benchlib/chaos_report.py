"""The chaos soak's account: what every process recorded, set against every key, and the
lateness around each fault.

`collect` reads the producers' and workers' record files and the topic's keys (fired
entries, pending ids, dead letters) and reconciles them (`wheelq.testing.reconcile`);
`reconcile_outbox` does the same for the outbox (`chaos_outbox`): every committed job fired
once, with its last committed version, and every poison row refused, and nothing else.
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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchlib.chaos_faults import Event
from benchlib.chaos_flows import (
    FLOWS_MUST_BE_ZERO,
    FlowAccount,
    FlowRecords,
    first_runs,
    reconcile_flows,
)
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
    target: Any, topic: str, shards: int, out: Path, max_runs: int, flows: bool = False
) -> tuple[Reconciliation, list[Fired], FlowAccount | None]:
    """Every acknowledged id against what the keys and the handlers show, and (`flows`) the
    flow producers' joins and continuations (`chaos_flows.reconcile_flows`)."""
    fired = asyncio.run(_read_fired(target, topic, shards))
    pending, dead = final_keys(target, topic, shards)
    flow_account = None
    if flows:
        flow_account = reconcile_flows(
            FlowRecords.read(out), fired, runs=first_runs(out), dead=dead, pending=pending
        )
    account = reconcile(
        _ids(out, "acked"),
        fired,
        pending=pending,
        cancelled=_ids(out, "cancelled"),
        dead=dead,
        handled=handled(out),
        max_runs=max_runs,
    )
    return account, fired, flow_account


def final_keys(target: Any, topic: str, shards: int) -> tuple[list[str], list[str]]:
    """The ids still pending (awaiting ones among them) and those dead-lettered."""
    conn = target.connect()
    pending: list[str] = []
    dead: list[str] = []
    for keys in all_shards(topic, shards):
        pending += [m.decode() for m in conn.zrange(keys.delayed, 0, -1)]
        for _, fields in conn.xrange(keys.dead):
            dead.append(fields[Field.ID].decode())
    return pending, dead


async def _read_fired(target: Any, topic: str, shards: int) -> list[Fired]:
    connection = target.connect_async()
    try:
        return await read_fired(connection, topic, shards)
    finally:
        await connection.aclose()


OUTBOX_MUST_BE_ZERO = (
    "lost",
    "fired_twice",
    "wrong_version",
    "early",
    "rolled_back_fired",
    "unknown_fired",
    "poison_not_rejected",
    "rejected_not_poison",
    "rows_left",
)
"""The outbox's broken promises: a committed job that never fired, or fired twice, or with
an older (or rolled-back) version's payload, or early; a job of a rolled-back transaction,
or one nobody committed, that fired; a poison row not in wheelq_outbox_rejected, a row
there that is no poison; a row left in wheelq_outbox at the end."""


@dataclass(frozen=True, slots=True)
class OutboxAccount:
    """The counts of `reconcile_outbox`, and up to 20 examples of each broken promise."""

    committed: int
    replaced: int
    """Of `committed`: ids with more than one committed version."""
    rolled_back: int
    in_doubt: int
    """Ids whose commit's outcome is unknown: they may fire once, with any of their versions."""
    poison: int
    fired: int
    rejected: int
    lost: int
    fired_twice: int
    wrong_version: int
    early: int
    rolled_back_fired: int
    unknown_fired: int
    poison_not_rejected: int
    rejected_not_poison: int
    rows_left: int
    examples: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(getattr(self, name) == 0 for name in OUTBOX_MUST_BE_ZERO)

    def as_dict(self) -> dict[str, Any]:
        out = {name: getattr(self, name) for name in self.__dataclass_fields__}
        out["ok"] = self.ok
        return out


def reconcile_outbox(
    records: Iterable[tuple[str, str, int]],
    fired: Iterable[tuple[Fired, Any]],
    *,
    poison: Mapping[int, str],
    rejected: Iterable[int],
    rows_left: int,
) -> OutboxAccount:
    """Set what was written to the outbox against what fired and what the tables hold.

    Args:
        records: ``(outcome, job id, version)`` in the order written: ``C`` committed,
            ``R`` rolled back, ``U`` unknown; a job's payload is ``[job id, version]``.
        fired: Every ready-stream entry of the outbox's topic, with its decoded payload.
        poison: seq -> kind of every poison row written by plain SQL.
        rejected: The seqs in wheelq_outbox_rejected.
        rows_left: The rows in wheelq_outbox at the end.
    """
    last: dict[str, int] = {}  # id -> its last committed version
    versions: Counter[str] = Counter()
    doubt: set[str] = set()
    rolled: set[str] = set()
    for outcome, job_id, version in records:
        if outcome == "C":
            last[job_id] = version
            versions[job_id] += 1
        elif outcome == "U":
            doubt.add(job_id)
        else:
            rolled.add(job_id)
    rolled -= last.keys() | doubt  # an id with a committed version is judged by that
    entries = list(fired)
    fired_ids = {f.job_id for f, _ in entries}
    by_attempt = Counter((f.job_id, f.attempt) for f, _ in entries)
    poison_seqs, rejected_seqs = set(poison), set(rejected)
    examples: dict[str, list[str]] = {}

    def count(name: str, ids: Iterable[str]) -> int:
        found = sorted(set(ids))
        if found:
            examples[name] = [i[:80] for i in found[:20]]
        return len(found)

    def seqs(name: str, found: set[int]) -> int:
        return count(name, [f"{seq} ({poison.get(seq, 'no poison')})" for seq in sorted(found)])

    judged = last.keys() - doubt
    wrong = [
        f.job_id for f, got in entries if f.job_id in judged and got != [f.job_id, last[f.job_id]]
    ]
    return OutboxAccount(
        committed=len(last),
        replaced=sum(1 for n in versions.values() if n > 1),
        rolled_back=len(rolled),
        in_doubt=len(doubt),
        poison=len(poison_seqs),
        fired=len(fired_ids & last.keys()),
        rejected=len(rejected_seqs),
        lost=count("lost", judged - fired_ids),
        fired_twice=count("fired_twice", [i for (i, _), n in by_attempt.items() if n > 1]),
        wrong_version=count("wrong_version", wrong),
        early=count("early", [f.job_id for f, _ in entries if f.lateness_ms < 0]),
        rolled_back_fired=count("rolled_back_fired", fired_ids & rolled),
        unknown_fired=count("unknown_fired", fired_ids - last.keys() - rolled - doubt),
        poison_not_rejected=seqs("poison_not_rejected", poison_seqs - rejected_seqs),
        rejected_not_poison=seqs("rejected_not_poison", rejected_seqs - poison_seqs),
        rows_left=rows_left,
        examples=examples,
    )


def failures(
    account: Reconciliation,
    settled: bool,
    deaths: Mapping[str, Sequence[int]],
    outbox: OutboxAccount | None = None,
    drained: bool = True,
    flows: FlowAccount | None = None,
) -> list[str]:
    """Why the run failed, one line a reason; empty when it passed. It fails on a broken
    promise of the account (`MUST_BE_ZERO`), the outbox's (`OUTBOX_MUST_BE_ZERO`) or the
    flows' (`FLOWS_MUST_BE_ZERO`), a
    run that did not settle or whose outbox did not drain, and any process that ended
    without being told to (`deaths`: name -> its return codes; -N is signal N), since the
    faults cover the deaths they cause."""
    out = [f"{name}: {getattr(account, name)}" for name in MUST_BE_ZERO if getattr(account, name)]
    if outbox is not None:
        out += [
            f"outbox {name}: {getattr(outbox, name)}"
            for name in OUTBOX_MUST_BE_ZERO
            if getattr(outbox, name)
        ]
    if flows is not None:
        out += [
            f"flows {name}: {getattr(flows, name)}"
            for name in FLOWS_MUST_BE_ZERO
            if getattr(flows, name)
        ]
    if not settled:
        out.append("did not settle: jobs still pending, unread or unacked")
    if not drained:
        out.append("outbox did not drain: rows left, or committed jobs not fired")
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
    if result.get("flows"):
        lines += _flows_markdown(result["flows"])
    if result.get("outbox"):
        lines += _outbox_markdown(result["outbox"], result.get("outbox_faults", []))
    return "\n".join(lines) + "\n"


FLOWS_COLUMNS = ("joins", "continuations", "in_doubt", "cancelled", "fired", "dead",
                 *FLOWS_MUST_BE_ZERO)  # fmt: skip


def _flows_markdown(account: dict[str, Any]) -> list[str]:
    """The flows' account, and examples of what broke."""
    lines = [
        "",
        "Jobs that follow jobs (joins' parents and continuations):",
        "",
        "| " + " | ".join(name.replace("_", " ") for name in FLOWS_COLUMNS) + " |",
        "|" + "---|" * len(FLOWS_COLUMNS),
        "| " + " | ".join(str(account[name]) for name in FLOWS_COLUMNS) + " |",
    ]
    for name, ids in account.get("examples", {}).items():
        lines.append(f"- {name.replace('_', ' ')}: {', '.join(ids[:5])}")
    return lines


OUTBOX_COLUMNS = ("committed", "replaced", "rolled_back", "poison", "fired", "rejected",
                  *OUTBOX_MUST_BE_ZERO)  # fmt: skip


def _outbox_markdown(account: dict[str, Any], events: list[dict[str, Any]]) -> list[str]:
    """The outbox's account, its faults in the order injected, and examples of what broke."""
    lines = [
        "",
        f"Outbox ({'drained' if account.get('drained') else 'did not drain'}):",
        "",
        "| " + " | ".join(name.replace("_", " ") for name in OUTBOX_COLUMNS) + " |",
        "|" + "---|" * len(OUTBOX_COLUMNS),
        "| " + " | ".join(str(account[name]) for name in OUTBOX_COLUMNS) + " |",
    ]
    if events:
        shown = Counter(e["fault"] for e in events)
        lines += ["", "Outbox faults: " + ", ".join(f"{n} x{c}" for n, c in sorted(shown.items()))]
    for name, ids in account.get("examples", {}).items():
        lines.append(f"- {name.replace('_', ' ')}: {', '.join(ids[:5])}")
    return lines


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
