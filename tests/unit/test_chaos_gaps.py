"""The chaos soak's report of a node's kill (loadtest/benchlib/chaos_report.py `by_fault`):
the widest gap in a shard's stream across the kill, per event and per class."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "loadtest"))

from benchlib.chaos_faults import Event
from benchlib.chaos_report import by_fault, markdown

from wheelq.core.keys import shard_of
from wheelq.testing import Fired

SHARDS = 2


def ids_of(shard: int, n: int) -> list[str]:
    """`n` job ids that live in `shard`."""
    out, i = [], 0
    while len(out) < n:
        if shard_of(f"j{i}", SHARDS) == shard:
            out.append(f"j{i}")
        i += 1
    return out


def test_a_kill_reports_the_widest_gap_of_a_shard_across_it() -> None:
    kill_ms = 10_000
    steady, stalled = ids_of(0, 20), ids_of(1, 20)
    fired = [Fired(j, 9_000 + 100 * n, 9_001 + 100 * n) for n, j in enumerate(steady)]
    # Shard 1's leader died at the kill: its entries stop at 9,950 and resume at 10,430.
    fired += [Fired(j, 9_050 + 100 * n, 9_051 + 100 * n) for n, j in enumerate(stalled[:10])]
    fired += [Fired(j, 10_000 + 10 * n, 10_430 + n) for n, j in enumerate(stalled[10:])]
    events = [Event("node_kill", kill_ms, kill_ms + 2000), Event("worker_kill", 9_500, 9_600)]

    report = by_fault(fired, events, SHARDS)

    (kill,) = [e for e in report["events"] if e["fault"] == "node_kill"]
    assert kill["stream_gap_ms"] == 10_430 - 9_951
    assert report["classes"]["node_kill"]["stream_gap_ms_max"] == 10_430 - 9_951
    (other,) = [e for e in report["events"] if e["fault"] == "worker_kill"]
    assert "stream_gap_ms" not in other


def test_a_kill_that_was_not_applied_reports_no_gap() -> None:
    fired = [Fired(j, 100 * n, 100 * n + 1) for n, j in enumerate(ids_of(0, 5))]
    event = Event("node_kill", 250, 300, detail={"not_applied": "n0 is not ready"})
    (row,) = by_fault(fired, [event], SHARDS)["events"]
    assert "stream_gap_ms" not in row


def test_the_report_names_each_kill_and_its_gap_or_that_none_could_be_measured() -> None:
    kill_ms = 10_000
    steady = ids_of(0, 20)
    fired = [Fired(j, 9_000 + 100 * n, 9_001 + 100 * n) for n, j in enumerate(steady)]
    events = [
        Event("node_kill", 8_000, 8_100, detail={"target": "n0"}),  # before any entry
        Event("node_kill", kill_ms, kill_ms + 2000, detail={"target": "n1"}),
    ]
    counts = ("acknowledged", "fired", "cancelled", "pending", "dead", "lost", "fired_twice")
    more = ("early", "handled_never", "handled_again", "handled_too_often")
    result = {
        "seed": 1,
        "minutes": 1,
        "deployment": "test",
        "start_ms": 7_000,
        "account": dict.fromkeys(counts + more, 0),
        "faults": by_fault(fired, events, SHARDS),
        "lateness_ms": {"p50": 1, "p99": 1, "p99.9": 1, "max": 1},
    }

    text = markdown(result)

    assert "n0 at 1.0 s: no shard fired on both sides; n1 at 3.0 s: 100 ms." in text
