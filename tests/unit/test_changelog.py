"""CHANGELOG.md follows Keep a Changelog, and its latest release is the package's version."""

from __future__ import annotations

import re
from importlib.metadata import version

import wheelq
from tests.support.cli import ROOT

RELEASE = re.compile(r"^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})$", re.MULTILINE)


def test_the_latest_release_is_the_package_version() -> None:
    releases = RELEASE.findall((ROOT / "CHANGELOG.md").read_text("utf-8"))
    assert releases, "CHANGELOG.md has no '## [X.Y.Z] - YYYY-MM-DD' release"
    assert releases[0][0] == wheelq.__version__ == version("wheelq")


def test_releases_are_newest_first_without_repeats() -> None:
    releases = RELEASE.findall((ROOT / "CHANGELOG.md").read_text("utf-8"))
    numbers = [tuple(int(x) for x in v.split(".")) for v, _ in releases]
    assert numbers == sorted(set(numbers), reverse=True)
    dates = [d for _, d in releases]
    assert dates == sorted(dates, reverse=True)
