"""Fixtures of the every-face matrix (docs/contributing.md): a served app for the HTTP and
console faces and the pull consumers, the workers' pool, and the row's face."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.support.consumers import FAST
from tests.support.faces import FACES, Face, cli_once, opened
from tests.support.web import Served, serving
from tests.support.workers import Workers
from wheelq.core.settings import WorkerSettings
from wheelq.testing import ServerBinary


@pytest.fixture
async def served(redis_url: str) -> AsyncIterator[Served]:
    """The HTTP service (API, console, pull consumers) on the test's server."""
    settings = WorkerSettings(visibility_timeout_ms=1000, claim_interval_ms=100)
    async with serving(redis_url, worker_settings=settings) as app:
        yield app


@pytest.fixture
async def pool(redis_url: str, topic: str) -> AsyncIterator[Workers]:
    """Workers on the test's topic with the matrix's fast settings, stopped at teardown."""
    workers = Workers(redis_url, topic, FAST)
    try:
        yield workers
    finally:
        await workers.close()


@pytest.fixture
def face_app(request: pytest.FixtureRequest) -> Served | None:
    """`served` when the row's face is one over HTTP (only those rows start the app)."""
    name = request.node.callspec.params["face"]
    return request.getfixturevalue("served") if FACES[name].uses_http else None


@pytest.fixture
async def face(
    request: pytest.FixtureRequest,
    deployment: str,
    server_binary: ServerBinary,
    redis_url: str,
    face_app: Served | None,
) -> AsyncIterator[Face]:
    """The row's face (``@pytest.mark.parametrize("face", having(verb), indirect=True)``);
    a CLI row runs once (`cli_once`)."""
    if request.param == "cli":
        cli_once(request.node, deployment, server_binary)
    async with opened(request.param, redis_url, face_app) as opened_face:
        yield opened_face
