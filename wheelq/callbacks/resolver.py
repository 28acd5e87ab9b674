"""The callbacks' SSRF guard: callback URLs come from whoever may enqueue, and must not
reach the deliverer's own network unless that is allowed.

Every check reads the host as aiohttp connects to it (yarl's parse, `private_target`),
and the last one is on the address actually connected to, after resolution: a name that
resolves to a private address (or changes to one after the URL was accepted) is refused
by `PublicOnlyResolver`, and an IP literal, which aiohttp never resolves, by
`public_socket`, the connector's socket factory, which sees every address before the
socket connects.
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
    """Why `url` must not be called when private targets are not allowed, or "".

    The host is the one aiohttp connects to (yarl's: IDNA/UTS46, Unicode digits and
    dots mapped, an IPv6 literal compressed), so no spelling of an address reads
    differently here and in the connection. A name is "" here: its addresses are checked
    as it connects.
    """
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
    """The connector's socket factory: a socket for `addr_info`, unless the address it is
    about to connect to is private.

    Raises:
        PrivateTargetError: It is (the deliverer dead-letters the job).
    """
    family, type_, proto, _, address = addr_info
    if private_address(address[0]):
        raise PrivateTargetError(f"{address[0]} is a private address; {ALLOW_HINT} it")
    return socket.socket(family=family, type=type_, proto=proto)


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
                f"({', '.join(sorted({r['host'] for r in found}))}); {ALLOW_HINT} them"
            )
        return public

    async def close(self) -> None:
        await self._inner.close()
