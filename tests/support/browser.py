"""A real headless Chromium for the dashboard's browser tests (Debian's, through playwright):
the `browser` fixture, registered in tests/integration/conftest.py. It skips, saying why,
only where no Chromium can be had; CI installs one (.ci/run)."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from typing import Any

import pytest


def chromium_path() -> str | None:
    """``WHEELQ_CHROMIUM`` when set, else chromium or chromium-browser on PATH."""
    given = os.environ.get("WHEELQ_CHROMIUM")
    names = [given] if given else ["chromium", "chromium-browser"]
    return next((found for name in names if (found := shutil.which(name))), None)


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    path = chromium_path()
    if path is None:
        given = os.environ.get("WHEELQ_CHROMIUM")
        where = f"WHEELQ_CHROMIUM={given!r} is not" if given else "no chromium on PATH, nor"
        pytest.skip(f"no Chromium to run the browser tests: {where} an executable")
    playwright = pytest.importorskip("playwright.async_api")
    async with playwright.async_playwright() as p:
        launched = await p.chromium.launch(
            executable_path=path, headless=True, args=["--no-sandbox"]
        )
        try:
            yield launched
        finally:
            await launched.close()


SERIOUS = frozenset({"serious", "critical"})


def serious_violations(response: dict[str, Any]) -> list[str]:
    """An axe-core scan's (`axe_playwright_python`'s ``results.response``) serious and
    critical violations, each as "rule (impact): the first element it names"."""
    return [
        f"{v['id']} ({v['impact']}): {v['nodes'][0]['target']}"
        for v in response["violations"]
        if v["impact"] in SERIOUS
    ]


@pytest.fixture
async def page(browser: Any) -> AsyncIterator[Any]:
    """A page in a context of its own, closed after the test."""
    context = await browser.new_context()
    try:
        yield await context.new_page()
    finally:
        await context.close()
