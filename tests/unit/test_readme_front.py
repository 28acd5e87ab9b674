"""The README stays a user's front door: short, and true about what the package brings."""

from __future__ import annotations

import re
import tomllib

from tests.support.cli import ROOT

MAX_README_LINES = 250  # guides and figures' history belong in docs/ and loadtest/results/


def test_the_readme_stays_within_its_line_budget() -> None:
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines, > {MAX_README_LINES}"


def test_the_readme_names_every_extra_that_all_brings() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (all_,) = project["optional-dependencies"]["all"]
    brought = re.fullmatch(r"wheelq\[([\w,]+)\]", all_)
    assert brought is not None, all_
    readme = (ROOT / "README.md").read_text()
    said = re.search(r"`\[all\]` extra brings ([^.]+)\.", readme)
    assert said is not None, "the README says what `[all]` brings"
    assert set(re.findall(r"`(\w+)`", said.group(1))) == set(brought.group(1).split(","))


def test_the_license_is_an_spdx_expression() -> None:
    """A ``{ text = ... }`` table warns on every build that it stops building in 2027."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert isinstance(project["license"], str) and project["license"] == "MIT"
