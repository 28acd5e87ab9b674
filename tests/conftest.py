"""Fixtures for every suite. Server fixtures live in tests/integration/conftest.py,
so unit tests never start a server."""

from __future__ import annotations

import re
import secrets

import pytest

from tests.support.tracing import traced  # noqa: F401 (the tracing tests' fixture)
from wheelq.runtime import tracing

_NOT_TOPIC_CHARS = re.compile(r"[^A-Za-z0-9_.-]+")


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    """A topic name of its own for each test: ``t-<test name>-<8 hex>``, at most 52 chars."""
    name = _NOT_TOPIC_CHARS.sub("-", request.node.name).strip("-")[:40]
    return f"t-{name}-{secrets.token_hex(4)}"


@pytest.fixture(autouse=True)
def untraced(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run every test on the path most installs take: without the ``otel`` extra (the dev
    install has opentelemetry for the tracing tests, which opt in with
    `tests.support.tracing.traced`)."""
    monkeypatch.setattr(tracing, "_loaded", None)
