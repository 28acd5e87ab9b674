"""Every Python and shell block of the README and the site runs in a test or says why not.

A block runs when its page section is registered in `tests.support.docs.RUN` with the test
that runs it; otherwise the line before its fence is ``<!-- not run: REASON -->``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.support.cli import ROOT
from tests.support.docs import (
    DOCS,
    FENCE,
    NEEDS,
    NOT_RUN,
    PYTHON,
    RUN,
    blocks,
    defined_names,
    free_names,
    iter_checked,
    pages,
)


def _where(block: object) -> str:
    return f"{block.page}:{block.line} ({block.section or 'top'})"  # type: ignore[attr-defined]


def test_every_block_runs_or_says_why_not() -> None:
    silent = [_where(b) for b in iter_checked() if not b.runs and b.not_run is None]
    assert not silent, (
        "these blocks neither run in a test (tests.support.docs.RUN) nor say why not "
        "(<!-- not run: REASON --> on the line before the fence):\n" + "\n".join(silent)
    )


def test_a_block_that_runs_is_not_also_marked_as_not_run() -> None:
    both = [_where(b) for b in iter_checked() if b.runs and b.not_run is not None]
    assert not both, "marked as not run inside a section a test runs:\n" + "\n".join(both)


@pytest.mark.parametrize(
    ("page", "section"), sorted(RUN), ids=[f"{p}::{s}" for p, s in sorted(RUN)]
)
def test_each_registered_section_is_run_by_the_test_it_names(page: str, section: str) -> None:
    path, function = RUN[page, section].split("::")
    tree = ast.parse((ROOT / path).read_text("utf-8"))
    found = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == function
    ]
    assert found, f"{path} has no test {function}"
    strings = {
        node.value
        for node in ast.walk(found[0])
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }
    assert page in strings, f"{function} does not name {page}"
    assert section in strings, f"{function} does not name the section {section!r}"
    assert section == "*" or any(b.section == section for b in blocks(page)), (
        f"{page} has no section {section!r}"
    )


def test_python_blocks_are_python() -> None:
    """A Python block that does not parse is a typo a reader would copy."""
    bad = []
    for block in iter_checked():
        if block.lang in ("python", "py"):
            try:
                ast.parse(block.body)
            except SyntaxError as e:
                bad.append(f"{_where(block)}: {e}")
    assert not bad, "\n".join(bad)


def test_the_marker_is_found_only_on_the_line_before_a_fence() -> None:
    """A misspelt or misplaced marker would leave its block silently unchecked."""
    marker = re.compile(r"<!--\s*not\s*run", re.IGNORECASE)
    for page in pages():
        text = page.read_text("utf-8")
        fences = {m.start() for m in FENCE.finditer(text)}
        for m in marker.finditer(text):
            rest = text[m.start() :]
            following = rest.split("\n", 1)[1] if "\n" in rest else ""
            assert NOT_RUN.search(text[: m.start()] + rest.split("\n", 1)[0] + "\n"), (
                f"{page.name}: a malformed marker at {text[: m.start()].count(chr(10)) + 1}"
            )
            start = m.start() + len(rest) - len(following)
            assert start + len(following) - len(following.lstrip(" ")) in fences, (
                f"{page.name}:{text[: m.start()].count(chr(10)) + 1}: "
                "a not-run marker that is not on the line before a fence"
            )


def test_a_marker_covers_only_the_fence_right_after_it(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "## A\n\n<!-- not run: needs a cluster -->\n```bash\nwheelq a\n```\n\n"
        "<!-- --8<-- [end:x] -->\n```bash\nwheelq b\n```\n\n"
        "<!-- not run: spans\n two lines -->\n\n```python\nprint(1)\n```\n"
    )
    found = [(b.body.strip(), b.not_run) for b in blocks(page)]
    assert found == [
        ("wheelq a", "needs a cluster"),
        ("wheelq b", None),  # another comment before it: not marked
        ("print(1)", "spans\n two lines"),
    ]


@pytest.mark.parametrize("page", sorted((DOCS / "guides").glob("*.md")), ids=lambda p: p.stem)
def test_every_guide_snippet_stands_alone_or_says_what_it_needs(page: Path) -> None:
    # Issue 43 item 18: "Return a result" used URL, asyncio and wheelq from earlier blocks.
    # A snippet pasted alone runs, or its first comment says what to paste first: a
    # "# needs: NAME, ..." whose names are exactly what it lacks, each defined by an
    # earlier snippet of its page.
    earlier: set[str] = set()
    wrong = []
    for block in blocks(page):
        if block.lang not in PYTHON:
            continue
        lacking = free_names(block.body)
        said = NEEDS.match(block.body)
        needs = {n.strip() for n in said["names"].split(",")} if said else set()
        if lacking != needs or not needs <= earlier:
            wrong.append(f"{_where(block)}: lacks {sorted(lacking)}, says {sorted(needs)}")
        earlier |= defined_names(block.body)
        if (file := re.match(r"# (\w+)\.py\n", block.body)) is not None:
            earlier.add(file[1])  # a module to import
    assert not wrong, "\n".join(wrong)
