"""Servers for tests that need one of their own, the server kinds each test runs on, and the
guard that keeps tests off the developer's own Redis (6379) and PostgreSQL (5432).

The shared session server (fixture ``server`` in tests/integration/conftest.py)
must stay up and unconfigured; a test that restarts, kills, pauses or
reconfigures a server, or needs AUTH or TLS, starts its own with
`dedicated_server`.
"""

from __future__ import annotations

import errno
import functools
import os
import socket
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from wheelq.errors import EmbeddedServerError
from wheelq.testing import EmbeddedServer, ServerBinary, find_server_binaries

BINARIES = [
    b
    for b in find_server_binaries()
    if b.kind in os.environ.get("WHEELQ_TEST_SERVERS", b.kind).split(",")
]
"""Every server binary found, or those of the kinds ``WHEELQ_TEST_SERVERS`` lists
(``valkey``, ``redis``, comma-separated): a quicker run on one kind."""

EVERY_SERVER = os.environ.get("WHEELQ_TEST_EVERY_SERVER", "") not in ("", "0")
"""``WHEELQ_TEST_EVERY_SERVER=1``: every test on every kind, ``both_servers`` or not."""


def server_kinds(item: pytest.Item) -> list[ServerBinary]:
    """The server binaries a test runs on (tests/integration/conftest.py): all of `BINARIES`
    for a test marked ``both_servers`` (or with `EVERY_SERVER`), else the one its file's
    name hashes to (CRC-32, the same in every process and run, so pytest-xdist's workers
    agree)."""
    if len(BINARIES) < 2 or EVERY_SERVER or item.get_closest_marker("both_servers"):
        return BINARIES
    return [BINARIES[zlib.crc32(item.path.name.encode()) % len(BINARIES)]]


# A primary waits 5 s by default for more replicas before a diskless full sync.
SYNC_AT_ONCE = ("--repl-diskless-sync-delay", "0")
FORBIDDEN_PORTS = frozenset({6379, 5432})  # the developer's own Redis and PostgreSQL live there


@contextmanager
def dedicated_server(binary: ServerBinary, **kwargs: Any) -> Iterator[EmbeddedServer]:
    """Start a server of its own for one test and stop it afterwards.

    Args:
        binary: Usually the ``server_binary`` fixture, so the test runs on each kind.
        **kwargs: Passed to `EmbeddedServer` (port, password, appendonly, tls, ...).

    Yields:
        The running server.
    """
    if kwargs.get("port") in FORBIDDEN_PORTS:
        raise ValueError(f"port must not be one of {sorted(FORBIDDEN_PORTS)}, got {kwargs['port']}")
    with EmbeddedServer(binary, **kwargs) as server:
        yield server


def free_port() -> int:
    """A loopback port nothing listens on now (for a server a test starts later)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    if port in FORBIDDEN_PORTS:
        return free_port()
    return port


@functools.cache
def tls_supported(binary: ServerBinary) -> bool:
    """Whether `binary` can serve TLS: starts one TLS server per binary per session.

    Raises:
        EmbeddedServerError: The TLS server failed for another reason (no trustme, ...).
    """
    try:
        with EmbeddedServer(binary, tls=True):
            return True
    except EmbeddedServerError as exc:
        if "no TLS support" in str(exc):
            return False
        raise


class PortGuard:
    """Refuses connections to forbidden ports and remembers every attempt.

    Installed by patching ``socket.socket.connect``/``connect_ex``, which both
    redis-py and asyncio's ``sock_connect`` go through. The attempt fails with
    ConnectionRefusedError before anything is sent, and is recorded in
    `attempts` so a caller that swallows the error is still caught. libpq (psycopg)
    opens its own sockets: the ``port_guard`` fixture gives it defaults that lead nowhere.
    """

    def __init__(self, ports: frozenset[int] = FORBIDDEN_PORTS) -> None:
        self.ports = set(ports)
        self.attempts: list[tuple[Any, ...]] = []

    def _forbidden(self, address: object) -> bool:
        if isinstance(address, tuple) and len(address) >= 2 and address[1] in self.ports:
            self.attempts.append(address)
            return True
        return False

    def wrap_connect(self, connect: Callable[..., None]) -> Callable[..., None]:
        """Return a ``socket.connect`` replacement that refuses forbidden ports."""

        def guarded(sock: socket.socket, address: Any) -> None:
            if self._forbidden(address):
                raise ConnectionRefusedError(
                    errno.ECONNREFUSED, f"test guard: port {address[1]} is off limits to tests"
                )
            connect(sock, address)

        return guarded

    def wrap_connect_ex(self, connect_ex: Callable[..., int]) -> Callable[..., int]:
        """Return a ``socket.connect_ex`` replacement that refuses forbidden ports."""

        def guarded(sock: socket.socket, address: Any) -> int:
            if self._forbidden(address):
                return errno.ECONNREFUSED
            return connect_ex(sock, address)

        return guarded
