"""Name resolution that refuses private addresses (SSRF): callback URLs come from whoever
may enqueue, and must not reach the deliverer's own network unless that is allowed.

The check is on the addresses actually connected to, after resolution, so a name that
resolves to a private address (or changes to one after the URL was accepted) is refused
as surely as an IP literal. aiohttp does not resolve IP literals: the deliverer checks
those itself (`wheelq.core.callback.private_address`).
"""

from __future__ import annotations

import socket

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

from wheelq.core.callback import private_address


class PrivateTargetError(OSError):
    """Every address a callback host resolved to is private, loopback or link-local."""


class PublicOnlyResolver(AbstractResolver):
    """The default resolver, less every non-public address; raises `PrivateTargetError`
    when none is left."""

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
                f"({', '.join(sorted({r['host'] for r in found}))}); "
                "set [callbacks] allow_private = true to allow them"
            )
        return public

    async def close(self) -> None:
        await self._inner.close()
