"""The callbacks' SSRF guard: a callback URL must not reach the deliverer's own network
unless that is allowed (docs/security.md).
"""

from __future__ import annotations

import socket
from typing import Any

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver
from yarl import URL

from wheelq.core.callback import private_address, undeliverable

ALLOW_HINT = "set [callbacks] allow_private = true to allow"


class PrivateTargetError(OSError):
    """A callback's target is a private, loopback or link-local address."""


def private_target(url: str | URL) -> str:
    """Why `url` must not be called, or "" (a name's addresses are checked as it connects)."""
    try:
        host = (url if isinstance(url, URL) else URL(url)).raw_host or ""
    except ValueError as exc:
        return f"callback {url} has a host the HTTP client cannot read ({exc})"
    if private_address(host):
        return f"callback {url} targets a private address ({host})"
    why = undeliverable(host, bracketed=":" in host)
    if why:
        return f"callback {url} has a host the HTTP client cannot deliver to ({why})"
    return ""


def public_socket(addr_info: tuple[Any, ...]) -> socket.socket:
    """The connector's socket factory: raises `PrivateTargetError` for a private address."""
    family, type_, proto, _, address = addr_info
    if private_address(address[0]):
        raise PrivateTargetError(f"{address[0]} is a private address; {ALLOW_HINT} it")
    return socket.socket(family=family, type=type_, proto=proto)


class PublicOnlyResolver(AbstractResolver):
    """The default resolver, less every non-public address."""

    def __init__(self) -> None:
        self._inner = DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        found = await self._inner.resolve(host, port, family)
        public = [r for r in found if not private_address(r["host"])]
        if not public:
            raise PrivateTargetError(
                f"{host} resolves only to private addresses "
                f"({', '.join(sorted({r['host'] for r in found}))}); {ALLOW_HINT} them"
            )
        return public

    async def close(self) -> None:
        await self._inner.close()
