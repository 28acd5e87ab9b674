"""What the peer adapters share: one phase's names and files, and the adapter interface.

An adapter (`peer_arq`, `peer_rq`, `peer_dramatiq`) knows one library: the command
lines of its worker for each setting, how to enqueue delayed jobs with it, and which
Redis keys a run leaves behind. `peers.run_peers` does the rest.
"""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit, urlunsplit

import redis

LOADTEST = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SETTINGS = ("default", "aggressive")


@dataclass(frozen=True)
class Run:
    """One phase of one peer: a queue of its own, its Redis URL and its record file."""

    peer: str
    url: str
    token: str
    record_path: str

    @classmethod
    def new(cls, peer: str, url: str, record_dir: str, phase: str) -> Run:
        token = secrets.token_hex(4)
        return cls(peer, url, token, os.path.join(record_dir, f"{peer}-{phase}-{token}.rec"))

    @property
    def queue(self) -> str:
        return f"bench-peer-{self.peer}-{self.token}"

    def job_id(self, index: int) -> str:
        return f"{self.token}-{index}"


class Peer(Protocol):
    """One library under test."""

    name: str
    db: int | None
    """A Redis db of its own (for libraries with fixed global key names), or None."""
    concurrency: str
    """How one worker process runs jobs with the library's defaults, in words."""

    def version(self) -> str: ...

    def setting(self, name: str) -> str:
        """The poll setting `name` ("default" / "aggressive") in words, with its value."""
        ...

    def worker_commands(self, run: Run, setting: str) -> list[list[str]]:
        """Arguments to `python -m benchlib.peer_tasks` for each process of one worker."""
        ...

    def enqueue_all(self, run: Run, items: Sequence[tuple[int, float]]) -> float:
        """Enqueue (index, due epoch ms) jobs one call at a time; the loop's seconds."""
        ...

    def cleanup(self, r: redis.Redis, run: Run) -> int:
        """Delete what `run` left in Redis (r is on the run's db); keys deleted."""
        ...


def worker_argv(args: Sequence[str]) -> list[str]:
    return [sys.executable, "-m", "benchlib.peer_tasks", *args]


def worker_env() -> dict[str, str]:
    """The environment of a worker process: `benchlib` importable."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (LOADTEST, env.get("PYTHONPATH")) if p)
    return env


def with_db(url: str, db: int | None) -> str:
    """`url` with its database number replaced by `db` (unchanged when db is None)."""
    if db is None:
        return url
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{db}", parts.query, parts.fragment))


def drop_matching(r: redis.Redis, patterns: Sequence[str]) -> int:
    """Delete every key matching one of the SCAN `patterns`; how many were deleted."""
    deleted = 0
    for pattern in patterns:
        batch: list[bytes] = []
        for key in r.scan_iter(match=pattern, count=1000):
            batch.append(key)
            if len(batch) >= 500:
                deleted += int(r.delete(*batch))
                batch.clear()
        if batch:
            deleted += int(r.delete(*batch))
    return deleted
