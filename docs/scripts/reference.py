"""Write the CLI, configuration and HTTP API reference pages from the code.

    python docs/scripts/reference.py           # (re)write the pages and openapi.json
    python docs/scripts/reference.py --check   # exit 1 naming each stale file; write nothing

The CLI page comes from `wheelq.cli.build_parser()`, the configuration page from the
settings classes (`wheelq.core.settings`: each field's `Range`, default and attribute
docstring) and the CLI's sections (`wheelq.cli.context`), the HTTP API page and
``openapi.json`` from the OpenAPI document of `wheelq serve`. The output depends on the
code only: no terminal width, clock or installed version enters it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script: the checkout's wheelq, installed or not
    sys.path.insert(0, str(ROOT))

from docs.scripts.cli_reference import cli_page  # noqa: E402
from docs.scripts.config_reference import configuration_page  # noqa: E402
from docs.scripts.http_reference import http_page, openapi_document, openapi_json  # noqa: E402
from docs.scripts.markdown_text import COMMAND  # noqa: E402

CLI_PAGE = "docs/reference/cli.md"
CONFIG_PAGE = "docs/reference/configuration.md"
HTTP_PAGE = "docs/reference/http-api.md"
OPENAPI = "docs/reference/openapi.json"


def generated() -> dict[str, str]:
    """Each generated file (its path from the repository root) with its content."""
    document = openapi_document()
    pages: dict[str, Callable[[], str]] = {
        CLI_PAGE: cli_page,
        CONFIG_PAGE: configuration_page,
        HTTP_PAGE: lambda: http_page(document),
        OPENAPI: lambda: openapi_json(document),
    }
    return {path: make() for path, make in pages.items()}


def stale(files: Mapping[str, str], root: Path) -> list[str]:
    """The files of `files` whose copy under `root` differs (or is missing)."""
    out = []
    for path, text in files.items():
        target = root / path
        if not target.is_file() or target.read_text() != text:
            out.append(path)
    return out


def main(argv: Sequence[str] | None = None, root: Path = ROOT) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="exit 1 naming each stale file; write nothing"
    )
    args = parser.parse_args(argv)
    files = generated()
    outdated = stale(files, root)
    if args.check:
        for path in outdated:
            print(f"{path} is stale: run {COMMAND}", file=sys.stderr)
        return 1 if outdated else 0
    for path in outdated:
        (root / path).write_text(files[path])
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
