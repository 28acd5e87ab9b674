"""The chaos soak's account of jobs that follow jobs: every join and continuation the flow
producer wrote (`chaos_roles.flow_producer`) set against what fired, what was
dead-lettered, what is still pending and when the handlers ran.

A join's parent (or a continuation) must fire exactly once, never before every job it
awaits has run, and never when one of those was cancelled (``on_child_failure="fail"``
dead-letters a join's parent; ``on_parent_failure="cancel"`` cancels a continuation); none
may still be pending once the soak settled. A call whose outcome is unknown (``U``) may have
written its parent or not: if it did, the same rules hold.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchlib.chaos_roles import read_log
from wheelq.testing import Fired

FLOWS_MUST_BE_ZERO = ("stuck", "lost", "doubled", "early", "ran_after_failure", "handled_never")
"""The flows' broken promises: a parent (or continuation) still pending at the end, one
that neither fired nor ended as its policy says, one fired twice (or fired and
dead-lettered), one fired before a job it awaits had run, one that fired although a job it
awaits was cancelled, one fired and never handled."""


@dataclass(frozen=True, slots=True)
class FlowAccount:
    """The counts of `reconcile_flows`, and up to 20 examples of each broken promise."""

    joins: int
    continuations: int
    in_doubt: int
    cancelled: int
    """Flows with a child (or followed job) cancelled for sure: their parent must not run."""
    fired: int
    dead: int
    stuck: int
    lost: int
    doubled: int
    early: int
    ran_after_failure: int
    handled_never: int
    examples: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(getattr(self, name) == 0 for name in FLOWS_MUST_BE_ZERO)

    def as_dict(self) -> dict[str, Any]:
        out = {name: getattr(self, name) for name in self.__dataclass_fields__}
        out["ok"] = self.ok
        return out


@dataclass
class FlowRecords:
    """What the flow producers wrote (`chaos_roles.flow_producer`'s ``flows-NAME.log``)."""

    awaits: dict[str, list[str]] = field(default_factory=dict)
    """A join's parent -> its children; a continuation -> [the job it follows]."""
    joins: set[str] = field(default_factory=set)
    doubt: set[str] = field(default_factory=set)
    cancelled: set[str] = field(default_factory=set)
    maybe_cancelled: set[str] = field(default_factory=set)

    @classmethod
    def parse(cls, lines: Iterable[str]) -> FlowRecords:
        records = cls()
        for line in lines:
            kind, job_id, *rest = line.split(" ")
            if kind == "J":
                records.awaits[job_id] = rest[0].split(",")
                records.joins.add(job_id)
            elif kind == "C":
                records.awaits[job_id] = [rest[0]]
            elif kind == "U":
                records.doubt.add(job_id)
            elif kind == "X" and rest[0] == "1":
                records.cancelled.add(job_id)
            elif kind == "X" and rest[0] == "?":
                records.maybe_cancelled.add(job_id)
        return records

    @classmethod
    def read(cls, out: Path) -> FlowRecords:
        paths = sorted(out.glob("flows-*.log"))
        return cls.parse(line for path in paths for line in read_log(path))


def first_runs(out: Path) -> dict[str, int]:
    """Job id -> the wall-clock ms of its first handler start, from every worker's record."""
    firsts: dict[str, int] = {}
    for path in sorted(out.glob("runs-*.log")):
        for line in read_log(path):
            job_id, _, ms = line.split(" ")
            firsts[job_id] = min(firsts.get(job_id, int(ms)), int(ms))
    return firsts


def reconcile_flows(
    records: FlowRecords,
    fired: Iterable[Fired],
    *,
    runs: Mapping[str, int],
    dead: Iterable[str],
    pending: Iterable[str],
) -> FlowAccount:
    """Judge every parent and continuation of `records` (see the module's docstring).

    Args:
        fired: Every ready-stream entry of the topic.
        runs: Job id -> when its handler first started (ms, `first_runs`).
        dead: The ids in the dead-letter streams.
        pending: The ids in the sorted sets at the end (awaiting ones among them).
    """
    entries = [f for f in fired if f.attempt == 1]
    firsts: dict[str, int] = {}
    for f in entries:
        firsts[f.job_id] = min(firsts.get(f.job_id, f.entry_ms), f.entry_ms)
    times = Counter(f.job_id for f in entries)
    dead_ids, pending_ids = set(dead), set(pending)
    known = records.awaits.keys() - records.doubt
    parents = known | (records.doubt & (firsts.keys() | dead_ids | pending_ids))
    broken: dict[str, list[str]] = {name: [] for name in FLOWS_MUST_BE_ZERO}
    for parent in sorted(parents):
        awaited = records.awaits.get(parent) or _children_seen(parent, runs, firsts)
        failed = [a for a in awaited if a in records.cancelled or a in dead_ids]
        unsure = any(a in records.maybe_cancelled for a in awaited)
        ran = parent in firsts
        if parent in pending_ids:
            broken["stuck"].append(parent)
        elif times[parent] > 1 or (ran and parent in dead_ids):
            broken["doubled"].append(parent)
        elif ran and failed:
            broken["ran_after_failure"].append(parent)
        elif ran and any(runs.get(a, firsts[parent] + 1) > firsts[parent] for a in awaited):
            broken["early"].append(parent)
        elif ran and parent not in runs:
            broken["handled_never"].append(parent)
        elif not ran and not failed and not unsure and parent in known:
            broken["lost"].append(parent)
    counts = {name: len(ids) for name, ids in broken.items()}
    return FlowAccount(
        joins=len(records.joins),
        continuations=len(records.awaits) - len(records.joins),
        in_doubt=len(records.doubt),
        cancelled=sum(1 for p in known if set(records.awaits[p]) & records.cancelled),
        fired=len(parents & firsts.keys()),
        dead=len(parents & dead_ids),
        **counts,
        examples={name: ids[:20] for name, ids in broken.items() if ids},
    )


def _children_seen(parent: str, runs: Mapping[str, int], firsts: Mapping[str, int]) -> list[str]:
    """An in-doubt join's children, as far as they ran or fired (``PARENT-cK``); an in-doubt
    continuation follows ``...aSEQ`` for its ``...bSEQ``."""
    head, _, seq = parent.rpartition("-")
    if seq.startswith("b"):
        return [f"{head}-a{seq[1:]}"]
    return sorted({i for i in (*runs, *firsts) if i.startswith(f"{parent}-c")})
