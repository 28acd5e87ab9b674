"""Draw the docs' diagrams: every ``docs/img/*.dot`` to the ``.svg`` beside it, with
Graphviz's ``dot`` (Debian's and Ubuntu's ``graphviz`` package).

    python docs/scripts/diagrams.py              # rewrite docs/img/*.svg; check them in
    python docs/scripts/diagrams.py --out DIR    # draw into DIR instead (the test does)

Exits 1, saying how to install it, when ``dot`` is not on PATH; exits 1 with dot's own
message when a ``.dot`` file does not parse.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from html import unescape
from pathlib import Path

IMG = Path(__file__).resolve().parent.parent / "img"
TEXT = re.compile(r"<text\b[^>]*>(.*?)</text>", re.DOTALL)


class DotMissingError(RuntimeError):
    """Graphviz's `dot` is not on PATH."""


def dot_binary() -> str:
    """The path of `dot`; DotMissingError, saying how to get it, when it is not on PATH."""
    found = shutil.which("dot")
    if found is None:
        raise DotMissingError(
            "Graphviz's `dot` is not on PATH: install it (Debian and Ubuntu: "
            "`sudo apt install graphviz`; macOS: `brew install graphviz`) and run again"
        )
    return found


def sources(img: Path = IMG) -> list[Path]:
    """The diagrams' sources: every .dot file in `img`, sorted."""
    return sorted(img.glob("*.dot"))


def render(source: Path, target: Path) -> None:
    """Draw `source` (a .dot file) to `target` as SVG; CalledProcessError if dot fails."""
    subprocess.run(  # noqa: S603 (our own argument list)
        [dot_binary(), "-Tsvg", str(source), "-o", str(target)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip


def labels(svg: str) -> list[str]:
    """The text elements of an SVG drawn by dot (its node, edge and graph labels), in
    document order, unescaped."""
    return [unescape(t).strip() for t in TEXT.findall(svg)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="write the SVGs here (default: beside each .dot)")
    args = parser.parse_args(argv)
    try:
        dot_binary()
    except DotMissingError as e:
        print(f"diagrams.py: {e}", file=sys.stderr)
        return 1
    found = sources()
    if not found:
        print(f"diagrams.py: no .dot file in {IMG}", file=sys.stderr)
        return 1
    for source in found:
        target = (args.out or source.parent) / f"{source.stem}.svg"
        try:
            render(source, target)
        except subprocess.CalledProcessError as e:
            print(f"diagrams.py: dot failed on {source.name}:\n{e.stderr}", file=sys.stderr)
            return 1
        print(f"{source.name} -> {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
