"""The chaos soak's account of the outbox (loadtest/benchlib/chaos_report.py
`reconcile_outbox`): every committed job fired exactly once, a replaced id with its last
committed version's payload; no job of a rolled-back transaction fired; every poison row in
wheelq_outbox_rejected and nothing else; the table empty. Each broken promise fails the
soak (`failures`), as a frozen relay's late write (its batch fired twice), a poison row
that blocked or poisoned a batch, and two relays placing an older replace last would."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "loadtest"))

from benchlib.chaos_outbox import POISON, poison_rows
from benchlib.chaos_report import (
    OUTBOX_MUST_BE_ZERO,
    failures,
    markdown,
    reconcile_outbox,
)

from wheelq.testing import Fired, reconcile

DUE_MS = 10_000
CLEAN_MAIN = reconcile([], [])
RECORDS = [
    ("C", "a", 1),
    ("C", "b", 1),
    ("R", "gone", 1),  # rolled back on purpose: must never fire
    ("C", "r", 1),  # a replace series: v1, v2 committed, v3 rolled back
    ("C", "r", 2),
    ("R", "r", 3),
]
POISON_ROWS = {7: "invalid_topic", 8: "undecodable_envelope"}


def entry(job_id: str, version: int, late_ms: int = 5, attempt: int = 1) -> tuple[Fired, Any]:
    return Fired(job_id, DUE_MS, DUE_MS + late_ms, attempt), [job_id, version]


CLEAN_FIRED = [entry("a", 1), entry("b", 1), entry("r", 2)]


def account(
    fired: Sequence[tuple[Fired, Any]] = CLEAN_FIRED,
    records: Sequence[tuple[str, str, int]] = RECORDS,
    rejected: Sequence[int] = (7, 8),
    rows_left: int = 0,
) -> Any:
    return reconcile_outbox(
        records, fired, poison=POISON_ROWS, rejected=rejected, rows_left=rows_left
    )


def test_a_clean_outbox_passes_with_its_counts() -> None:
    clean = account()
    assert clean.ok
    assert (clean.committed, clean.replaced, clean.rolled_back, clean.fired) == (3, 1, 1, 3)
    assert (clean.poison, clean.rejected) == (2, 2)
    assert failures(CLEAN_MAIN, True, {}, clean, drained=True) == []


def test_a_frozen_relays_late_write_fires_its_batch_twice() -> None:
    late = account([*CLEAN_FIRED, entry("a", 1, late_ms=9000), entry("b", 1, late_ms=9000)])
    assert late.fired_twice == 2
    assert late.examples["fired_twice"] == ["a", "b"]
    assert failures(CLEAN_MAIN, True, {}, late) == ["outbox fired_twice: 2"]


def test_an_older_replace_placed_last_is_a_wrong_version() -> None:
    older = account([entry("a", 1), entry("b", 1), entry("r", 1)])
    assert (older.wrong_version, older.fired_twice, older.lost) == (1, 0, 0)
    rolled_back_version = account([entry("a", 1), entry("b", 1), entry("r", 3)])
    assert rolled_back_version.wrong_version == 1, "v3 was rolled back: v2 is the last"


def test_a_committed_job_that_never_fired_is_lost_and_rows_left_count() -> None:
    blocked = account([entry("a", 1)], rows_left=2)
    assert (blocked.lost, blocked.rows_left) == (2, 2)
    assert blocked.examples["lost"] == ["b", "r"]


def test_jobs_nobody_committed_must_not_fire() -> None:
    stray = account([*CLEAN_FIRED, entry("gone", 1), entry("poison-1-empty_id", 1)])
    assert (stray.rolled_back_fired, stray.unknown_fired) == (1, 1)


def test_every_poison_row_is_rejected_and_nothing_else() -> None:
    # A MALFORMED shard call rejected the rows before the poison (9, 10), which had fired.
    mixed = account(rejected=(8, 9, 10))
    assert (mixed.poison_not_rejected, mixed.rejected_not_poison) == (1, 2)
    assert mixed.examples["poison_not_rejected"] == ["7 (invalid_topic)"]
    assert mixed.examples["rejected_not_poison"] == ["10 (no poison)", "9 (no poison)"]


def test_an_early_firing_counts() -> None:
    assert account([entry("a", 1, late_ms=-3), entry("b", 1), entry("r", 2)]).early == 1


def test_a_job_whose_commit_is_in_doubt_may_be_unfired_but_not_fired_twice() -> None:
    doubt = [*RECORDS, ("U", "maybe", 1)]
    assert account(records=doubt).ok
    assert account([*CLEAN_FIRED, entry("maybe", 1)], records=doubt).ok
    twice = account([*CLEAN_FIRED, entry("maybe", 1), entry("maybe", 1)], records=doubt)
    assert twice.fired_twice == 1


@pytest.mark.parametrize("count", OUTBOX_MUST_BE_ZERO)
def test_each_broken_promise_of_the_outbox_fails_the_soak(count: str) -> None:
    broken = dataclasses.replace(account(), **{count: 3})
    assert not broken.ok
    assert failures(CLEAN_MAIN, True, {}, broken) == [f"outbox {count}: 3"]


def test_an_outbox_that_did_not_drain_fails_the_soak() -> None:
    assert failures(CLEAN_MAIN, True, {}, account(), drained=False) == [
        "outbox did not drain: rows left, or committed jobs not fired"
    ]


def test_the_report_shows_the_outbox_counts_and_examples() -> None:
    late = account([*CLEAN_FIRED, entry("a", 1)])
    result = {
        "seed": 7,
        "minutes": 2,
        "deployment": "valkey",
        "account": CLEAN_MAIN.as_dict(),
        "faults": {"classes": {}, "events": []},
        "start_ms": 0,
        "lateness_ms": {"p50": 1, "p99": 2, "p99.9": 3, "max": 4},
        "outbox": late.as_dict() | {"drained": True},
        "outbox_faults": [{"fault": "relay_stop"}, {"fault": "relay_stop"}],
    }
    text = markdown(result)
    assert (
        "| committed | replaced | rolled back | poison | fired | rejected | lost | fired twice"
        in text
    )
    assert "| 3 | 1 | 1 | 2 | 3 | 2 | 0 | 1 |" in text
    assert "Outbox faults: relay_stop x2" in text
    assert "- fired twice: a" in text


def test_each_poison_row_spoils_the_column_its_kind_names() -> None:
    rows = poison_rows("chaos-1-outbox", "poison-1")
    assert tuple(rows) == POISON
    spoiled = {
        "invalid_topic": ("topic", "not a topic!"),
        "undecodable_envelope": ("envelope", b"\xc1\xc1\xc1"),
        "empty_id": ("job_id", ""),
        "long_id": ("job_id", rows["long_id"]["job_id"]),
        "far_due": ("value_ms", 9 * 10**18),
        "negative_delay": ("value_ms", -5000),
    }
    clean = poison_rows("chaos-1-outbox", "poison-1")["empty_id"] | {"job_id": "x"}
    for kind, (column, value) in spoiled.items():
        assert rows[kind][column] == value, kind
        others = {c for c in clean if c not in ("job_id", "envelope") and rows[kind][c] != clean[c]}
        assert others <= {column, "mode"}, (kind, others)
    assert len(rows["long_id"]["job_id"].encode()) == 300
