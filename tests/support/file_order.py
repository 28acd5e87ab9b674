"""The order pytest-xdist hands the test files out in: longest first; and the seconds each
file took, measured by every run.

With ``--dist loadfile`` each worker takes a whole file at a time, so the run ends when the
worker holding the last long file is done: a 10-minute file handed out last leaves the other
worker idle for most of that time. Handing the files out longest first (the classic LPT
rule) lets the short ones fill in around the long ones. The lengths are the seconds each file
took in a run of the whole suite, kept in ``tests/file_seconds.json``; a file not in it counts
as `UNKNOWN_S_PER_TEST` a test.

Every run measures its files (`FileClock`: each test's setup, call and teardown, as the
process that prints the summary receives them: with pytest-xdist, the controller), prints
the ten slowest at the end and keeps the table in pytest's cache. Refresh the order from the
last run that left no test of its files out (one with ``-k``, ``-m``, ``--deselect`` or
``--lf`` keeps the cache as it was)::

    python -m pytest
    python -m tests.support.file_order            # --slowest: only print the ten slowest

or from a run's JUnit XML: ``python -m tests.support.file_order /tmp/junit.xml``. Either way
the run's files replace their entries, and files no longer there drop out.

The order changes when a file runs, never what it runs or how (a file's tests keep their
order), so a stale table costs time, not correctness.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "tests" / "file_seconds.json"
CACHE_KEY = "wheelq/file_seconds"
"""Where a run leaves its files' seconds in pytest's cache (``.pytest_cache/v/``)."""
UNKNOWN_S_PER_TEST = 0.5
"""A file missing from the table: about what an integration test takes on average."""
SLOWEST = 10


def file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def order_longest_first(items: list[pytest.Item]) -> None:
    """Sort `items` in place: files by their seconds in `TABLE`, longest first, each file's
    tests in their own order (the sort is stable)."""
    seconds: dict[str, float] = json.loads(TABLE.read_text()) if TABLE.exists() else {}
    counts: dict[str, int] = defaultdict(int)
    for item in items:
        counts[file_of(item.nodeid)] += 1

    def weight(item: pytest.Item) -> float:
        name = file_of(item.nodeid)
        return seconds.get(name, counts[name] * UNKNOWN_S_PER_TEST)

    items.sort(key=weight, reverse=True)


class FileClock:
    """The seconds each file's tests took (setup, call and teardown, as a JUnit report
    counts them), its tests, and the seconds each pytest-xdist worker spent."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.tests: dict[str, int] = defaultdict(int)
        self.workers: dict[str, float] = defaultdict(float)

    def add(self, report: pytest.TestReport) -> None:
        name = file_of(report.nodeid)
        self.seconds[name] += report.duration
        if report.when == "call" or (report.when == "setup" and not report.passed):
            self.tests[name] += 1
        gateway = getattr(getattr(report, "node", None), "gateway", None)
        self.workers[str(getattr(gateway, "id", "main"))] += report.duration

    def table(self) -> dict[str, float]:
        """Each file's seconds, longest first, as `TABLE` keeps them."""
        return {n: round(s, 1) for n, s in sorted(self.seconds.items(), key=lambda kv: -kv[1])}

    def summary(self) -> list[str]:
        """The lines printed at the end of a run: the slowest files, the workers' shares."""
        total = sum(self.seconds.values())
        lines = [
            f"{s:8.1f} s {self.tests[n]:5d} tests  {n}"
            for n, s in list(self.table().items())[:SLOWEST]
        ]
        lines.append(f"{total:8.1f} s in {len(self.seconds)} files")
        if len(self.workers) > 1:
            shares = ", ".join(f"{w} {s:.0f} s" for w, s in sorted(self.workers.items()))
            lines.append(f"by worker: {shares}")
        return lines


def merged(table: dict[str, float], old: dict[str, float]) -> dict[str, float]:
    """`old` with the files of `table` replaced and the files no longer in the tree dropped,
    longest first."""
    both = {n: s for n, s in {**old, **table}.items() if (ROOT / n).exists()}
    return dict(sorted(both.items(), key=lambda kv: -kv[1]))


def seconds_by_file(junit_xml: Path) -> dict[str, float]:
    """Each file's seconds in a JUnit XML report (its test cases' times added up)."""
    total: dict[str, float] = defaultdict(float)
    for case in ET.parse(junit_xml).getroot().iter("testcase"):
        module = case.get("classname", "")
        # classname is "tests.integration.test_x" or "tests.integration.test_x.TestClass"
        parts = module.split(".")
        while parts and not parts[-1].startswith("test_"):
            parts.pop()
        if parts:
            total["/".join(parts) + ".py"] += float(case.get("time", "0"))
    return {name: round(s, 1) for name, s in sorted(total.items(), key=lambda kv: -kv[1])}


def filtered(config: pytest.Config, deselected: int) -> bool:
    """Whether the run left tests of its files out (``-k``, ``-m``, ``--deselect``, ``--lf``):
    its seconds would undercount those files, so it does not replace the cached table."""
    option = config.option
    return bool(
        deselected
        or getattr(option, "keyword", "")
        or getattr(option, "markexpr", "")
        or getattr(option, "deselect", None)
        or getattr(option, "lf", False)
    )


def last_run() -> dict[str, float]:
    """The table the last run left in pytest's cache (`CACHE_KEY`), or {}."""
    cached = ROOT / ".pytest_cache" / "v" / CACHE_KEY
    return json.loads(cached.read_text()) if cached.exists() else {}


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        print("usage: python -m tests.support.file_order [JUNIT_XML | --slowest]", file=sys.stderr)
        return 2
    slowest = argv == ["--slowest"]  # .ci/run's last lines: the last run's slowest files
    table = seconds_by_file(Path(argv[0])) if argv and not slowest else last_run()
    if not table:
        print("no run recorded: run python -m pytest first", file=sys.stderr)
        return 0 if slowest else 1  # nothing to show fails no CI run
    if slowest:
        print(f"the slowest {SLOWEST} of {len(table)} files, {sum(table.values()):.0f} s in all:")
        for name, seconds in list(table.items())[:SLOWEST]:
            print(f"{seconds:8.1f} s  {name}")
        return 0
    old = json.loads(TABLE.read_text()) if TABLE.exists() else {}
    new = merged(table, old)
    TABLE.write_text(json.dumps(new, indent=1) + "\n")
    print(
        f"{len(table)} files from the run, {sum(table.values()):.0f} s; "
        f"{len(new)} files, {sum(new.values()):.0f} s in all: {TABLE}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
