"""The documentation site builds with ``mkdocs build --strict``, has every section the nav
promises with the references generated from the code, and fetches nothing from elsewhere
when it is read (no CDN: it works offline)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

import wheelq
from tests.support.cli import ROOT
from wheelq.producer.moved import Moved

# A URL that a page would load when it is shown (not a link a reader may follow).
FETCHED = re.compile(
    r"""<(?:script|img|iframe|source|audio|video)\b[^>]*\bsrc=["']?(?:https?:)?//"""
    r"""|<link\b[^>]*\brel=["']?(?:stylesheet|preload|icon|modulepreload)[^>]*\bhref=["']?(?:https?:)?//"""
    r"""|<link\b[^>]*\bhref=["']?(?:https?:)?//[^>]*\brel=["']?(?:stylesheet|preload|icon)"""
    r"""|@import\s+(?:url\()?["']?(?:https?:)?//"""
    r"""|url\(\s*["']?(?:https?:)?//""",
    re.IGNORECASE,
)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return out


def _nav_pages(nav: object) -> Iterator[str]:
    if isinstance(nav, str):
        yield nav
    elif isinstance(nav, list):
        for item in nav:
            yield from _nav_pages(item)
    elif isinstance(nav, dict):
        for value in nav.values():
            yield from _nav_pages(value)


def _built(site: Path, page: str) -> str:
    name = page.removesuffix(".md")
    path = site / "index.html" if name == "index" else site / name / "index.html"
    if name.endswith("/index"):
        path = site / name.removesuffix("/index") / "index.html"
    return path.read_text("utf-8")


def test_every_page_of_the_nav_is_built_and_written(site: Path) -> None:
    config = yaml.load((ROOT / "mkdocs.yml").read_text("utf-8"), Loader=yaml.BaseLoader)
    pages = list(_nav_pages(config["nav"]))
    tops = [next(iter(entry)) for entry in config["nav"]]
    for section in ("Getting started", "Concepts", "Guides", "Operations", "Reference"):
        assert section in tops, section
    assert {"Performance", "Changelog"} <= set(tops)
    for page in pages:
        html = _built(site, page)
        text = re.sub(r"<[^>]+>", " ", html.split('<article class="md-content__inner', 1)[1])
        assert "To be written" not in text, page
        assert len(text.split()) > 80, f"{page} is nearly empty"


def test_the_references_are_generated_from_the_code(site: Path) -> None:
    api = _built(site, "reference/python.md")
    for name in wheelq.__all__:
        assert f'id="wheelq.{name}"' in api, f"the Python API reference lacks {name}"
    assert "def enqueue" in api or "enqueue(" in api  # signatures are rendered
    for method in ("enqueue", "enqueue_many", "cancel", "reschedule", "get"):  # both clients
        assert f'id="wheelq.Client.{method}"' in api, method
        assert f'id="wheelq.AsyncClient.{method}"' in api, method
    # The managing methods are the admins'; the clients' deprecated aliases are left out.
    kept = [name for name, member in vars(wheelq.Client).items() if isinstance(member, Moved)]
    for method in [*kept, "stats"]:
        assert f'id="wheelq.Admin.{method}"' in api, method
        assert f'id="wheelq.AsyncAdmin.{method}"' in api, method
        assert f'id="wheelq.Client.{method}"' not in api, method
        assert f'id="wheelq.AsyncClient.{method}"' not in api, method
    assert 'id="wheelq.AsyncAdmin.events"' in api
    assert 'id="wheelq.AsyncClient.events"' not in api
    cli = _built(site, "reference/cli.md")
    for command in ("scheduler", "worker", "enqueue", "serve", "dlq", "schedule"):
        assert f"wheelq {command}" in cli, command
    config = _built(site, "reference/configuration.md")
    assert "WHEELQ_WORKER_VISIBILITY_TIMEOUT_MS" in config
    http = _built(site, "reference/http-api.md")
    assert "/v1/topics/{topic}/jobs" in http or "/v1/topics/{t}/jobs" in http
    changelog = _built(site, "changelog.md")
    assert f"[{wheelq.__version__}]" in changelog


def test_nothing_is_fetched_from_another_host_when_a_page_is_read(site: Path) -> None:
    offenders = []
    for path in site.rglob("*"):
        if path.suffix not in (".html", ".css", ".js"):
            continue
        text = path.read_text("utf-8", errors="replace")
        for m in FETCHED.finditer(text):
            offenders.append(f"{path.relative_to(site)}: {text[m.start() : m.start() + 120]}")
    assert not offenders, "\n".join(offenders[:20])


def test_the_offline_check_catches_a_cdn_asset() -> None:
    """The pattern above is the check: it must see the usual ways a page pulls from a CDN."""
    for html in (
        '<script src="https://cdn.jsdelivr.net/npm/mermaid.min.js"></script>',
        '<link rel="stylesheet" href="https://fonts.googleapis.com/css?family=Roboto">',
        '<link href="//unpkg.com/x.css" rel="stylesheet">',
        '@import url("https://fonts.googleapis.com/css2?family=Inter");',
        "src: url(https://fonts.gstatic.com/s/roboto.woff2)",
    ):
        assert FETCHED.search(html), html
    for html in ('<a href="https://keepachangelog.com/">', '<script src="assets/x.js">'):
        assert not FETCHED.search(html), html
