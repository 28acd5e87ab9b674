"""loadtest/lateness_at_scale.py without a server: its flags, the fire rate, what makes a
cell short, the medians over rounds and the table; and `at_limit`, which it shares with
the cluster scenario."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "loadtest"))

from benchlib import common
from lateness_at_scale import fire_rate, medians, parse_args, summarize_cell, table, why_short


def test_the_defaults_are_the_full_run_and_counts_take_exponents() -> None:
    args = parse_args([])
    assert args.pending == [0, 1_000_000, 10_000_000]
    assert args.rates == [1000, 10_000, 50_000]
    assert (args.window, args.burst, args.rounds, args.due) == (20.0, 100_000, 3, (2.0, 5.0))
    assert parse_args(["--pending", "0,1e6,2.5e5"]).pending == [0, 1_000_000, 250_000]


def test_quick_shrinks_only_what_was_not_given() -> None:
    args = parse_args(["--quick", "--rates", "1000"])
    assert args.rates == [1000]
    assert args.pending == [0, 20_000]
    assert args.rounds == 1


@pytest.mark.parametrize(
    "flags",
    [
        ["--pending", "-1"],
        ["--rates", "0"],
        ["--rates", "x"],
        ["--due", "5,2"],
        ["--due", "2"],
        ["--rounds", "0"],
    ],
    ids=["negative-pending", "zero-rate", "not-a-number", "due-reversed", "due-one", "no-rounds"],
)
def test_bad_flags_are_refused(flags: list[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(flags)


def test_the_fire_rate_counts_entries_while_the_due_rate_was_steady() -> None:
    entries = list(range(0, 10_000, 2))  # 500 a second for 10 s
    assert fire_rate(entries, 2000, 8000) == 500.0
    assert fire_rate(entries, 2000, 2500) is None  # under a second: no steady part


def cell(**changes: Any) -> dict[str, Any]:
    out = {
        "target_per_s": 1000,
        "enqueue_per_s": 1000.0,
        "fire_per_s": 990.0,
        "handled": True,
        "cores_busy": {"redis": 0.2, "scheduler": 0.1, "producer 0": 0.95, "machine": 1.9},
        "producers": [{"busy_share": 0.97}],
    }
    return out | changes


def test_a_cell_at_its_target_is_not_short() -> None:
    assert why_short(cell(), 60) == []
    assert why_short(cell(fire_per_s=None), 60) == []  # too short a window to tell


def test_a_short_cell_says_which_rate_and_what_the_processes_did() -> None:
    [enqueue] = why_short(cell(enqueue_per_s=900.0), 60)
    assert enqueue.startswith("enqueued 90% of the target")
    assert "producer 0 in enqueue calls 97% of its window at 0.95 cores" in enqueue
    [fire] = why_short(cell(fire_per_s=500.0), 60)
    assert fire.startswith("fired 50% of the target: Redis 0.2 cores, scheduler 0.1 cores")
    assert why_short(cell(handled=False), 60) == [
        "not every job handled within 60 s of the last due time"
    ]


def test_at_limit_names_a_process_at_a_core_and_a_full_machine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(common.os, "cpu_count", lambda: 2)
    assert common.at_limit({"redis": 0.5, "producer 0": 0.95}, 1.0) == ["producer 0: 0.95 cores"]
    assert common.at_limit({"redis": 0.5}, 1.85) == ["machine: 1.85 of 2 cores busy"]
    assert common.at_limit({"redis": 0.5}, 1.7) == []


def test_medians_go_key_by_key_and_keep_what_is_not_a_number() -> None:
    runs = [
        {"p99": 3, "late": {"max": 10.0}, "short": [], "server": "valkey"},
        {"p99": 1, "late": {"max": 30.0}, "short": ["fired 50%"], "server": "valkey"},
        {"p99": 2, "late": {"max": 20.0}, "short": [], "server": "valkey"},
    ]
    assert medians(runs) == {
        "p99": 2,
        "late": {"max": 20.0},
        "short": [[], ["fired 50%"], []],
        "server": "valkey",
    }


def test_the_table_has_a_row_per_cell_and_a_line_for_the_burst() -> None:
    late = {"p50": 1.0, "p99": 4.0, "max": 9.0}
    run = {
        "enqueue_per_s": 49_000.0,
        "fire_per_s": 30_000.0,
        "entry_lateness_ms": late,
        "handler_start_lateness_ms": late,
        "used_memory_mb": 1500.0,
        "redis_cpu_ms_per_1000_fired": 25.0,
        "at_limit": ["machine: 1.95 of 2 cores busy"],
        "short": ["fired 60% of the target"],
        "producers": [{"busy_share": 0.5}],
    }
    summary = summarize_cell([run])
    assert summary["short_rounds"] == 1
    assert "producers" not in summary["median"]
    burst = {"all_in_stream_after_s": 1.0, "drain_s": 3.0}
    burst |= {"entry_lateness_ms": late, "handler_start_lateness_ms": late}
    backlogs = [
        {
            "pending": 10_000_000,
            "cells": [{"rate_per_s": 50_000, **summary}],
            "burst": {"jobs": 100_000, "median": burst},
        }
    ]
    lines = table(backlogs)
    assert lines[2] == (
        "| 10,000,000 | 50,000 | 49,000 / 30,000 | 1 / 4 / 9 | 1 / 4 / 9 | 1,500 | 25.0 | "
        "1 of 1 rounds (machine in 1 of 1) |"
    )
    assert lines[-1].startswith("100,000 due at one instant on 10,000,000 pending")
