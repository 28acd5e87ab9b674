"""The order pytest-xdist hands the test files out in: longest first.

With ``--dist loadfile`` each worker takes a whole file at a time, so the run ends when the
worker holding the last long file is done: a 10-minute file handed out last leaves the other
worker idle for most of that time. Handing the files out longest first (the classic LPT
rule) lets the short ones fill in around the long ones. The lengths are the seconds each file
took in a CI run, kept in ``tests/file_seconds.json``; a file not in it counts as
`UNKNOWN_S_PER_TEST` a test. Regenerate the table from a run's JUnit XML::

    python -m pytest --junitxml=/tmp/junit.xml
    python -m tests.support.file_order /tmp/junit.xml

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

TABLE = Path(__file__).resolve().parents[1] / "file_seconds.json"
UNKNOWN_S_PER_TEST = 0.5
"""A file missing from the table: about what an integration test takes on average."""


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


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.support.file_order JUNIT_XML", file=sys.stderr)
        return 2
    table = seconds_by_file(Path(argv[0]))
    TABLE.write_text(json.dumps(table, indent=1) + "\n")
    print(f"{len(table)} files, {sum(table.values()):.0f} s in all: {TABLE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
