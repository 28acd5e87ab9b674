"""Fixtures for every suite. Server fixtures live in tests/integration/conftest.py,
so unit tests never start a server."""

from __future__ import annotations

import re
import secrets
from collections.abc import Generator

import pytest

from tests.support import file_order, gc_pauses
from tests.support.gc_pauses import NOTABLE_MS, GcPauses
from tests.support.tracing import traced  # noqa: F401 (the tracing tests' fixture)
from wheelq.runtime import tracing

_NOT_TOPIC_CHARS = re.compile(r"[^A-Za-z0-9_.-]+")


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    """A topic name of its own for each test: ``t-<test name>-<8 hex>``, at most 52 chars."""
    name = _NOT_TOPIC_CHARS.sub("-", request.node.name).strip("-")[:40]
    return f"t-{name}-{secrets.token_hex(4)}"


@pytest.fixture(autouse=True)
def untraced(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run every test on the path most installs take: without the ``otel`` extra (the dev
    install has opentelemetry for the tracing tests, which opt in with
    `tests.support.tracing.traced`)."""
    monkeypatch.setattr(tracing, "_loaded", None)


_pauses = GcPauses()
_clock = file_order.FileClock()
_deselected: list[int] = [0]
_notable: list[tuple[float, str]] = []
_leaked: list[str] = []
_figures: list[str] = []
_LEAKED, _PAUSE, FIGURE = "wheelq-leaked", "wheelq-gc-pause", "wheelq-figure"
"""The reports' user properties that carry a leak, a long pause or a figure a test measured
(``record_property(FIGURE, line)``: an image's size, a stop's time) to the process that
prints the summary (with pytest-xdist, the controller; the tests run in its workers)."""


def pytest_sessionstart(session: pytest.Session) -> None:
    _pauses.install()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest files first, for xdist to hand out (tests/support/file_order.py)."""
    file_order.order_longest_first(items)


def pytest_sessionfinish(session: pytest.Session) -> None:
    _pauses.uninstall()
    config = session.config
    cache = getattr(config, "cache", None)  # None with -p no:cacheprovider
    if (
        _clock.seconds
        and cache is not None
        and not hasattr(config, "workerinput")  # the controller, or the only process
        and not file_order.filtered(config, _deselected[0])
    ):
        cache.set(file_order.CACHE_KEY, _clock.table())  # python -m tests.support.file_order


def pytest_deselected(items: list[pytest.Item]) -> None:
    _deselected[0] += len(items)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    _pauses.reset()
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.when == "call" and _pauses.longest_ms >= NOTABLE_MS:
        report.sections.append(("garbage collector", _pauses.describe()))
        line = f"{item.nodeid}: {_pauses.describe()}"
        report.user_properties.append((_PAUSE, (_pauses.longest_ms, line)))
    while gc_pauses.LEAKED:  # found by the settle before this module's first test
        report.user_properties.append((_LEAKED, gc_pauses.LEAKED.pop(0)))
    return report


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _clock.add(report)
    for name, value in report.user_properties:
        if name == _PAUSE:
            ms, line = value  # type: ignore[misc]
            _notable.append((ms, line))
        elif name == _LEAKED:
            _leaked.append(str(value))
        elif name == FIGURE and report.when == "call":
            _figures.append(str(value))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _clock.seconds:
        terminalreporter.section(f"slowest {file_order.SLOWEST} files (tests/file_seconds.json)")
        for line in _clock.summary():
            terminalreporter.write_line(line)
    if _figures:
        terminalreporter.section("figures measured")
        for line in _figures:
            terminalreporter.write_line(line)
    if _leaked:
        terminalreporter.section("resources left open, freed between modules")
        for line in _leaked[:20]:
            terminalreporter.write_line(line[:3000])
    if _notable:
        terminalreporter.section("longest garbage collector pauses")
        for _, line in sorted(_notable, reverse=True)[:5]:
            terminalreporter.write_line(line)
