"""Periodic tasks' declarations (`App.periodic`), checked whole before anything is declared,
with no Redis; the record's ``declared`` marker, read back from every record version; and
``every=`` in seconds or a timedelta (docs/guides/tasks.md, "Periodic tasks")."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import msgpack
import pytest

import wheelq
from wheelq.admin import payload_checks
from wheelq.core.recurring import Schedule, interval_ms, recurrence
from wheelq.errors import InvalidArgumentError

URL = "redis://127.0.0.1:1/0"  # nothing there: a declaration needs no Redis


def make() -> tuple[wheelq.App, Any]:
    app = wheelq.App(URL)

    @app.task(name="reports.report", topic="reports")
    def report(kind: str, copies: int = 1) -> None:
        return None

    return app, report


def test_a_declaration_encodes_the_arguments_with_the_tasks_codec() -> None:
    app, report = make()
    made = app.periodic(report, every=timedelta(minutes=5), args=("daily",), kwargs={"copies": 2})
    assert (made.name, made.every_ms, made.cron, made.payload) == (
        "reports.report",
        300_000,
        None,
        {"kind": "daily", "copies": 2},
    )
    assert app.periodics == {"reports.report": made}
    (record,) = [p.record(app.client_settings, 1) for p in app.periodics.values()]
    assert (record.topic, record.declared, record.data) == (
        "reports",
        "reports.report",
        {"kind": "daily", "copies": 2},
    )


def test_the_issues_example_names_the_parameter() -> None:
    app, report = make()
    with pytest.raises(InvalidArgumentError) as raised:
        app.periodic(report, every=1, args=(5,))
    assert raised.value.parameter == "kind" and "kind" in str(raised.value)
    assert app.periodics == {}


BAD: list[tuple[dict[str, Any], str]] = [
    ({"every": 1, "args": (5,)}, "kind"),
    ({"every": 1}, "kind"),  # a required argument missing
    ({"every": 1, "args": ("d",), "kwargs": {"copies": "2"}}, "copies"),
    ({"every": 1, "args": ("d",), "kwargs": {"nope": 1}}, "nope"),
    ({"every": 1, "args": "d"}, "args"),
    ({"every": 1, "args": ("d",), "kwargs": [1]}, "kwargs"),
    ({"args": ("d",)}, "every"),  # neither every nor cron
    ({"every": 1, "cron": "@daily", "args": ("d",)}, "every"),  # both
    ({"every": 0.05, "args": ("d",)}, "every"),
    ({"every": float("nan"), "args": ("d",)}, "every"),
    ({"every": -1, "args": ("d",)}, "every"),
    ({"every": True, "args": ("d",)}, "every"),
    ({"every": "60", "args": ("d",)}, "every"),
    ({"every": timedelta(days=400), "args": ("d",)}, "every"),
    ({"cron": "* * * * * *", "args": ("d",)}, "cron"),
    ({"cron": "nope", "args": ("d",)}, "cron"),
    ({"cron": "@daily", "tz": "Mars/Olympus", "args": ("d",)}, "tz"),
    ({"every": 60, "tz": "Europe/Berlin", "args": ("d",)}, "tz"),
    ({"every": 60, "misfire": "later", "args": ("d",)}, "misfire"),
    ({"every": 60, "misfire": "all", "max_catch_up": 0, "args": ("d",)}, "max_catch_up"),
    ({"every": 60, "name": "has space", "args": ("d",)}, "name"),
    ({"every": 60, "name": "x" * 101, "args": ("d",)}, "name"),
    ({"every": 60, "max_attempts": 0, "args": ("d",)}, "max_attempts"),
    ({"every": 60, "key": "", "args": ("d",)}, "key"),
]


@pytest.mark.parametrize(("given", "parameter"), BAD, ids=[p for _, p in BAD])
def test_a_bad_declaration_names_the_parameter_and_declares_nothing(
    given: dict[str, Any], parameter: str
) -> None:
    app, report = make()
    with pytest.raises(InvalidArgumentError) as raised:
        app.periodic(report, **given)
    assert raised.value.parameter == parameter, raised.value
    assert app.periodics == {}


def test_a_task_of_another_app_or_a_plain_function_is_refused() -> None:
    app, _ = make()
    _, theirs = make()
    for task in (theirs, lambda kind: None):
        with pytest.raises(InvalidArgumentError) as raised:
            app.periodic(task, every=60, args=("d",))
        assert raised.value.parameter == "task"
    assert app.periodics == {}


def test_a_second_declaration_of_a_task_needs_its_own_name() -> None:
    app, report = make()
    app.periodic(report, every=60, args=("d",))
    with pytest.raises(InvalidArgumentError) as raised:
        app.periodic(report, cron="@daily", args=("w",))
    assert raised.value.parameter == "name"
    with pytest.raises(InvalidArgumentError) as raised:
        app.periodic(report, cron="@daily", args=("w",), name="reports.report")
    assert raised.value.parameter == "name"
    app.periodic(report, cron="@daily", args=("w",), name="weekly")
    assert sorted(app.periodics) == ["reports.report", "weekly"]


def test_a_tasks_own_max_attempts_applies_and_another_is_refused() -> None:
    app = wheelq.App(URL)

    @app.task(max_attempts=3)
    def ping() -> None:
        return None

    assert app.periodic(ping, every=60).options["max_attempts"] == 3
    with pytest.raises(InvalidArgumentError) as raised:
        app.periodic(ping, every=60, name="other", max_attempts=4)
    assert raised.value.parameter == "max_attempts"


def test_a_task_registers_its_payload_check_for_admin_schedule() -> None:
    _, report = make()
    payload_checks.check("reports", {"kind": "d"})
    with pytest.raises(InvalidArgumentError) as raised:
        payload_checks.check("reports", {"kind": 5})
    assert raised.value.parameter == "kind"
    payload_checks.check("no-task-here", {"anything": object()})  # no check: nothing raised
    del report


@pytest.mark.parametrize(
    ("every", "every_ms", "ms"),
    [(1, None, 1000), (1.5, None, 1500), (timedelta(minutes=2), None, 120_000), (None, 250, 250)],
)
def test_every_is_seconds_or_a_timedelta_and_every_ms_its_alias(
    every: Any, every_ms: Any, ms: int
) -> None:
    assert interval_ms(every, every_ms) == ms


def test_every_and_every_ms_together_are_refused() -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        interval_ms(1, 1000)
    assert raised.value.parameter == "every"


def _schedule(declared: str = "") -> Schedule:
    rule = recurrence(every_ms=60_000, start_ms=0)
    unset = wheelq.core.options.stored_unset()
    return Schedule("n", "t", rule, "once", 10, msgpack.packb(1), 3, unset, 7, declared=declared)


def test_the_declared_marker_is_stored_and_older_records_read_as_made_by_hand() -> None:
    marked = _schedule("app.report")
    back = Schedule.unpack("t", "n", marked.pack(), b"5")
    assert (back.declared, back.planned_ms) == ("app.report", 5)
    fields = msgpack.unpackb(marked.pack())
    assert fields["v"] == 3
    for version in (1, 2):  # written before the marker
        old = {k: v for k, v in fields.items() if k != "declared"} | {"v": version}
        assert Schedule.unpack("t", "n", msgpack.packb(old), b"0").declared == ""
    bad = msgpack.packb(fields | {"declared": 5})
    assert Schedule.stored("t", "n", bad, b"0").error is not None


def test_same_definition_ignores_state_and_time_but_not_the_marker() -> None:
    a = _schedule("x")
    assert a.same_definition(dataclasses.replace(a, updated_ms=99, planned_ms=5, paused=True))
    assert not a.same_definition(dataclasses.replace(a, declared=""))
    assert not a.same_definition(dataclasses.replace(a, payload=msgpack.packb(2)))
