"""`wheelq.testing.reconcile`: each count catches the fault it is named after, and a clean
run is clean."""

from __future__ import annotations

from wheelq.testing import Fired, reconcile


def fired(job_id: str, due: int = 100, at: int = 105, attempt: int = 1) -> Fired:
    return Fired(job_id, due, at, attempt)


def test_a_clean_run_is_ok_and_every_job_is_accounted_for() -> None:
    r = reconcile(
        ["a", "b", "c", "d", "e"],
        [fired("a"), fired("b"), fired("b", 200, 210, attempt=2)],  # b retried: not twice
        pending=["c"],
        cancelled=["d"],
        dead=["e"],
        handled={"a": 1, "b": 2},
        max_runs=2,
    )
    assert r.ok
    assert (r.acknowledged, r.fired, r.pending, r.cancelled, r.dead) == (5, 2, 1, 1, 1)
    assert (r.lost, r.fired_twice, r.early, r.handled_never, r.handled_too_often) == (0,) * 5
    assert r.handled_again == 1 and r.examples == {"handled_again": ["b"]}


def test_an_acknowledged_job_found_nowhere_is_lost() -> None:
    r = reconcile(["a", "gone"], [fired("a")], handled={"a": 1})
    assert (r.lost, r.ok, r.examples["lost"]) == (1, False, ["gone"])


def test_one_attempt_in_the_stream_twice_is_fired_twice() -> None:
    r = reconcile(["a"], [fired("a"), fired("a", at=106)], handled={"a": 1})
    assert (r.fired_twice, r.examples["fired_twice"], r.ok) == (1, ["a"], False)


def test_an_entry_before_its_due_time_is_early() -> None:
    r = reconcile(["a"], [fired("a", due=100, at=99)], handled={"a": 1})
    assert (r.early, r.ok) == (1, False)


def test_fired_but_never_handled_and_not_dead_is_counted() -> None:
    r = reconcile(["a", "b"], [fired("a"), fired("b")], dead=["b"], handled={})
    assert (r.handled_never, r.examples["handled_never"], r.ok) == (1, ["a"], False)


def test_runs_beyond_the_at_least_once_bound_are_too_many() -> None:
    r = reconcile(["a", "b"], [fired("a"), fired("b")], handled={"a": 2, "b": 3}, max_runs=2)
    assert (r.handled_again, r.handled_too_often) == (1, 1)
    assert r.examples["handled_too_often"] == ["b"] and not r.ok
    assert r.as_dict()["ok"] is False and r.as_dict()["handled_too_often"] == 1


def test_handlers_are_not_checked_when_not_given() -> None:
    r = reconcile(["a"], [fired("a")])
    assert r.ok and r.handled_never == 0
