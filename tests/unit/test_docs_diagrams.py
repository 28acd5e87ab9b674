"""The docs' diagrams are checked in drawn and current: every ``docs/img/*.dot`` has the
``.svg`` beside it, and that SVG says what the ``.dot`` says now.

"Current" compares the text elements (node, edge and graph labels) of the checked-in SVG
with those of a fresh drawing by `docs/scripts/diagrams.py`, not the bytes: the coordinates
and the version comment dot writes differ between Graphviz versions, the labels do not.
Without `dot` on PATH that comparison is skipped, saying so.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.cli import ROOT

IMG = ROOT / "docs" / "img"
SCRIPT = ROOT / "docs" / "scripts" / "diagrams.py"
SOURCES = sorted(IMG.glob("*.dot"))


def _diagrams() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_diagrams", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


diagrams = _diagrams()


def test_there_are_diagrams_and_each_has_its_svg() -> None:
    assert SOURCES, f"no .dot file in {IMG}"
    missing = [s.name for s in SOURCES if not s.with_suffix(".svg").is_file()]
    assert not missing, f"no .svg beside {missing}: run `python docs/scripts/diagrams.py`"


def test_labels_reads_the_text_elements_of_an_svg() -> None:
    svg = (
        '<svg><g><title>a</title><text x="1">one &amp; two</text>'
        '<text x="2" y="3">{T:s}:ready</text></g></svg>'
    )
    assert diagrams.labels(svg) == ["one & two", "{T:s}:ready"]


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_the_checked_in_svg_is_current(source: Path, tmp_path: Path) -> None:
    if shutil.which("dot") is None:
        pytest.skip("Graphviz's `dot` is not on PATH: cannot redraw to compare")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(tmp_path)],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    fresh = diagrams.labels((tmp_path / f"{source.stem}.svg").read_text("utf-8"))
    checked_in = diagrams.labels(source.with_suffix(".svg").read_text("utf-8"))
    assert fresh, f"{source.name} drew no labels"
    assert sorted(checked_in) == sorted(fresh), (
        f"docs/img/{source.stem}.svg is stale: run `python docs/scripts/diagrams.py`"
    )


def test_the_script_says_how_to_get_dot_when_it_is_missing(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(tmp_path)],
        capture_output=True, text=True, check=False, timeout=60,
        env={"PATH": str(tmp_path)},  # no dot there
    )  # fmt: skip
    assert done.returncode == 1
    assert "`dot` is not on PATH" in done.stderr
    assert "apt install graphviz" in done.stderr
    assert not list(tmp_path.glob("*.svg"))
