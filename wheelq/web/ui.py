"""The dashboard at ``/ui`` (server-rendered; filled in by the dashboard work)."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.staticfiles import StaticFiles

router = APIRouter(prefix="/ui", include_in_schema=False)
STATIC = Path(__file__).parent / "static"


def static_files() -> StaticFiles:
    return StaticFiles(directory=STATIC)
