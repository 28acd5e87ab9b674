"""The chaos soak's verdict (loadtest/benchlib/chaos_report.py `failures`): a run fails on
a broken promise of the account, on not settling, and on any process that died without
being told to, such as a node ended by a signal sent before it had installed its handler
(seed 4242: n0 ended by SIGUSR1, and the soak passed)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "loadtest"))

from benchlib.chaos_report import failures

from wheelq.testing import reconcile
from wheelq.testing.reconcile import MUST_BE_ZERO

CLEAN = reconcile([], [])


def test_a_clean_settled_run_without_deaths_passes() -> None:
    assert CLEAN.ok
    assert failures(CLEAN, True, {}) == []
    assert failures(CLEAN, True, {"n0": []}) == []


def test_an_unexpected_death_fails_the_soak_naming_the_process_and_signal() -> None:
    assert failures(CLEAN, True, {"n0": [-10]}) == ["n0 died unexpectedly (SIGUSR1)"]
    assert failures(CLEAN, True, {"w1": [-9, 1]}) == ["w1 died unexpectedly (SIGKILL, exit 1)"]


def test_a_run_that_did_not_settle_fails() -> None:
    assert failures(CLEAN, False, {}) == ["did not settle: jobs still pending, unread or unacked"]


@pytest.mark.parametrize("count", MUST_BE_ZERO)
def test_each_broken_promise_fails(count: str) -> None:
    broken = dataclasses.replace(CLEAN, **{count: 2})
    assert failures(broken, True, {}) == [f"{count}: 2"]
