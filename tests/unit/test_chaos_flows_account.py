"""The chaos soak's account of jobs that follow jobs (loadtest/benchlib/chaos_flows.py
`reconcile_flows`): a join's parent and a continuation fire exactly once, never before
every job they await ran, never when one of those was cancelled, and none is left
pending. Each broken promise is counted and fails the soak (`failures`), as a parent
stuck awaiting, released early by a lost notice or doubled by a replayed one would."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "loadtest"))

from benchlib.chaos_flows import FLOWS_MUST_BE_ZERO, FlowRecords, reconcile_flows
from benchlib.chaos_report import failures

from wheelq.testing import Fired, reconcile

LINES = [
    "J p c0,c1",  # a join: p awaits c0 and c1
    "C b a",  # a continuation: b follows a
    "J q d0,d1",  # a join whose child d1 is cancelled: q must be dead-lettered
    "X d1 1",
]
RUNS = {"c0": 100, "c1": 120, "a": 100, "d0": 100}
"""When each awaited job's handler first started (ms)."""


def fire(job_id: str, at_ms: int, attempt: int = 1) -> Fired:
    return Fired(job_id, at_ms, at_ms, attempt)


CLEAN_FIRED = [fire("p", 130), fire("b", 105)]
CLEAN_RUNS = {**RUNS, "p": 131, "b": 106}


def account(
    fired: Sequence[Fired] = CLEAN_FIRED,
    *,
    lines: Sequence[str] = LINES,
    runs: dict[str, int] = CLEAN_RUNS,
    dead: Sequence[str] = ("q",),
    pending: Sequence[str] = (),
) -> dict[str, object]:
    found = reconcile_flows(FlowRecords.parse(lines), fired, runs=runs, dead=dead, pending=pending)
    return found.as_dict()


def broken(found: dict[str, object]) -> dict[str, object]:
    return {name: found[name] for name in FLOWS_MUST_BE_ZERO if found[name]}


def test_a_clean_run_breaks_nothing() -> None:
    found = account()
    assert broken(found) == {}
    assert (found["joins"], found["continuations"], found["cancelled"]) == (2, 1, 1)
    assert (found["fired"], found["dead"]) == (2, 1)


@pytest.mark.parametrize(
    ("name", "change"),
    [
        ("stuck", {"fired": [fire("b", 105)], "pending": ["p"]}),
        ("lost", {"fired": [fire("b", 105)]}),
        ("lost", {"fired": [fire("p", 130)], "runs": {**CLEAN_RUNS, "b": 0}}),
        ("doubled", {"fired": [*CLEAN_FIRED, fire("p", 140)]}),
        ("doubled", {"dead": ["q", "p"]}),
        ("early", {"fired": [fire("p", 110), fire("b", 105)]}),  # before c1 ran at 120
        ("early", {"runs": {k: v for k, v in CLEAN_RUNS.items() if k != "c1"}}),  # c1 never ran
        ("ran_after_failure", {"fired": [*CLEAN_FIRED, fire("q", 130)], "dead": []}),
        ("handled_never", {"runs": {**RUNS, "p": 131}}),
    ],
)
def test_each_broken_promise_is_counted_and_fails_the_soak(
    name: str, change: dict[str, object]
) -> None:
    found = account(**change)  # type: ignore[arg-type]
    assert broken(found) == {name: 1}
    assert found["examples"]
    flows = reconcile_flows(
        FlowRecords.parse(LINES),
        change.get("fired", CLEAN_FIRED),  # type: ignore[arg-type]
        runs=change.get("runs", CLEAN_RUNS),  # type: ignore[arg-type]
        dead=change.get("dead", ("q",)),  # type: ignore[arg-type]
        pending=change.get("pending", ()),  # type: ignore[arg-type]
    )
    assert failures(reconcile([], []), True, {}, flows=flows) == [f"flows {name}: 1"]


def test_a_cancel_of_unknown_outcome_lets_the_parent_fire_or_end() -> None:
    lines = [*LINES, "X c1 ?"]
    assert broken(account(lines=lines)) == {}
    assert broken(account([fire("b", 105)], lines=lines)) == {}


def test_a_call_of_unknown_outcome_is_judged_only_if_its_parent_was_written() -> None:
    lines = ["U r", "U s-b4"]
    assert broken(account([], lines=lines, runs={})) == {}  # neither written
    runs = {"r-c0": 100, "s-a4": 100}
    assert broken(account([fire("r", 90)], lines=lines, runs=runs)) == {"early": 1}
    assert broken(account([fire("s-b4", 90)], lines=lines, runs=runs)) == {"early": 1}
    assert broken(account([], lines=lines, runs=runs, pending=["r"])) == {"stuck": 1}
