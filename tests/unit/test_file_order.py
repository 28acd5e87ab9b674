"""The per-file seconds every run measures (tests/support/file_order.py): each file's setup,
call and teardown added up, the ten slowest printed, and the table merged into
tests/file_seconds.json so the files no longer there drop out."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from tests.support import file_order


def report(nodeid: str, when: str, seconds: float, worker: str | None = None) -> Any:
    node = SimpleNamespace(gateway=SimpleNamespace(id=worker)) if worker else None
    return SimpleNamespace(nodeid=nodeid, when=when, duration=seconds, passed=True, node=node)


def test_a_files_seconds_add_up_its_tests_phases_and_each_workers_share() -> None:
    clock = file_order.FileClock()
    for nodeid, worker in [("tests/a/test_x.py::t1", "gw0"), ("tests/a/test_x.py::t2", "gw0")]:
        for when, s in [("setup", 0.5), ("call", 2.0), ("teardown", 0.25)]:
            clock.add(report(nodeid, when, s, worker))
    clock.add(report("tests/a/test_y.py::C::t[valkey]", "call", 9.0, "gw1"))

    assert clock.table() == {"tests/a/test_y.py": 9.0, "tests/a/test_x.py": 5.5}
    assert clock.tests == {"tests/a/test_x.py": 2, "tests/a/test_y.py": 1}
    lines = clock.summary()
    assert lines[0].split() == ["9.0", "s", "1", "tests", "tests/a/test_y.py"]
    assert lines[-2:] == ["    14.5 s in 2 files", "by worker: gw0 6 s, gw1 9 s"]


def test_a_run_replaces_its_files_and_the_files_gone_drop_out() -> None:
    old = {"tests/conftest.py": 1.0, "tests/gone/test_old.py": 50.0, "tests/unit/x.py": 3.0}
    new = file_order.merged({"tests/unit/test_file_order.py": 2.0, "tests/conftest.py": 4.0}, old)
    assert new == {"tests/conftest.py": 4.0, "tests/unit/test_file_order.py": 2.0}


def test_a_filtered_run_leaves_the_table_alone() -> None:
    def config(**option: object) -> Any:
        defaults = {"keyword": "", "markexpr": "", "deselect": None, "lf": False}
        return SimpleNamespace(option=SimpleNamespace(**{**defaults, **option}))

    assert not file_order.filtered(config(), 0)
    assert file_order.filtered(config(), 3)
    assert file_order.filtered(config(keyword="quickstart"), 0)
    assert file_order.filtered(config(markexpr="slow"), 0)
    assert file_order.filtered(config(deselect=["tests/x.py::t"]), 0)
    assert file_order.filtered(config(lf=True), 0)
