"""A job's HTTP callback: where `wheelq deliver` POSTs the job when it is due.

Pure: the URL is checked for its form here (scheme, host, length); whether its
host is a private or loopback address (SSRF) is decided where the URL is used,
by the HTTP service when it accepts a job and by the deliverer when it connects,
since only they know whether private targets are allowed and what a name
resolves to. In the job's envelope and stream entry the callback travels as one
msgpack map ``{"url": str, "headers": {str: str}, "timeout_ms": int}``.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import msgpack

from wheelq.core.checks import int_in
from wheelq.errors import InvalidArgumentError

MAX_URL_CHARS = 2048
MAX_HEADERS = 32
MAX_HEADER_CHARS = 4096
"""The longest header value."""
TIMEOUT_MS_RANGE = (1, 300_000)
DEFAULT_TIMEOUT_MS = 10_000
RESERVED_HEADERS = frozenset({"content-type", "content-length", "host", "transfer-encoding"})
"""Header names the deliverer sets itself (and every ``wheelq-`` name)."""
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,256}$")
"""An HTTP header name (RFC 9110 token)."""


@dataclass(frozen=True, slots=True)
class Callback:
    """Where a due job is POSTed (`wheelq deliver`), with extra headers and a time limit."""

    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    """Sent with the request, beside the ``Wheelq-*`` headers (which they cannot replace)."""
    timeout_ms: int = DEFAULT_TIMEOUT_MS
    """How long one attempt may take, connecting included: past it, the attempt failed."""

    @property
    def host(self) -> str:
        """The URL's host, lower case (an IPv6 literal without brackets)."""
        return (urlsplit(self.url).hostname or "").lower()

    def pack(self) -> bytes:
        packed: bytes = msgpack.packb(
            {"url": self.url, "headers": dict(self.headers), "timeout_ms": self.timeout_ms},
            use_bin_type=False,
        )
        return packed

    @classmethod
    def unpack(cls, data: bytes) -> Callback:
        """Decode and check a packed callback (the last 1,024 are remembered: the jobs of
        one endpoint carry the same bytes, and checking them again per job cost a
        deliverer a twentieth of its time).

        Raises:
            ValueError: Not one (a malformed entry: its job is dead-lettered).
        """
        return _unpack(data)


@functools.lru_cache(maxsize=1024)
def _unpack(data: bytes) -> Callback:
    try:
        raw = msgpack.unpackb(data, raw=False)
    except Exception as exc:  # msgpack raises several unrelated types
        raise ValueError(f"callback is not msgpack: {exc}") from exc
    if not isinstance(raw, dict):
        raise ValueError(f"callback is not a map: {raw!r:.80}")
    try:
        return validate_callback(raw)
    except InvalidArgumentError as exc:
        raise ValueError(str(exc)) from exc


def validate_callback(value: object) -> Callback:
    """A `Callback` from a `Callback`, a URL, or a mapping with ``url`` and optionally
    ``headers`` and ``timeout_ms``.

    Raises:
        InvalidArgumentError: Naming the field (``callback.url``, ``callback.headers``,
            ``callback.timeout_ms``) and what it accepts.
    """
    if isinstance(value, str):
        value = Callback(value)
    elif isinstance(value, Mapping):
        unknown = sorted(set(value) - {"url", "headers", "timeout_ms"}, key=str)
        if unknown:
            raise InvalidArgumentError(
                f"callback.{unknown[0]}",
                f"callback has no field {unknown[0]!r}; it takes url, headers, timeout_ms",
            )
        if "url" not in value:
            raise InvalidArgumentError("callback.url", "callback needs a url")
        value = Callback(
            value["url"],
            value.get("headers") or {},
            value.get("timeout_ms", DEFAULT_TIMEOUT_MS),
        )
    elif not isinstance(value, Callback):
        raise InvalidArgumentError(
            "callback",
            f"callback must be a Callback, a URL or a mapping, got {type(value).__name__}",
        )
    _check_url(value.url)
    _check_headers(value.headers)
    low, high = TIMEOUT_MS_RANGE
    timeout = value.timeout_ms
    return Callback(
        value.url, dict(value.headers), int_in("callback.timeout_ms", timeout, low, high)
    )


def _check_url(url: object) -> None:
    def bad(why: str) -> InvalidArgumentError:
        return InvalidArgumentError(
            "callback.url", f"callback.url must be an http(s) URL {why}, got {url!r:.200}"
        )

    if not isinstance(url, str) or not url or len(url) > MAX_URL_CHARS:
        raise bad(f"of 1-{MAX_URL_CHARS} characters")
    if not url.isprintable() or any(c.isspace() for c in url):
        raise bad("without spaces or control characters")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a port out of range
    except ValueError as exc:
        raise bad(f"({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise bad("with a host")
    if parts.username is not None or parts.password is not None:
        raise bad("without credentials (send them in callback.headers)")
    if parts.fragment:
        raise bad("without a #fragment")


def _check_headers(headers: object) -> None:
    if not isinstance(headers, Mapping) or len(headers) > MAX_HEADERS:
        raise InvalidArgumentError(
            "callback.headers",
            f"callback.headers must be a mapping of at most {MAX_HEADERS} headers, "
            f"got {headers!r:.100}",
        )
    for name, text in headers.items():
        if not isinstance(name, str) or not _TOKEN.match(name):
            raise InvalidArgumentError(
                "callback.headers", f"callback.headers: {name!r:.80} is not a header name"
            )
        low = name.lower()
        if low in RESERVED_HEADERS or low.startswith("wheelq-"):
            raise InvalidArgumentError(
                "callback.headers",
                f"callback.headers: {name} is set by the deliverer and cannot be given",
            )
        if (
            not isinstance(text, str)
            or len(text) > MAX_HEADER_CHARS
            or any(c in text for c in "\r\n\0")
        ):
            raise InvalidArgumentError(
                "callback.headers",
                f"callback.headers[{name!r}] must be a str of at most {MAX_HEADER_CHARS} "
                "characters without CR, LF or NUL",
            )


def private_address(host: str) -> bool:
    """Whether `host` (an IP literal, or ``localhost``) is loopback, private, link-local or
    otherwise not a public address; a DNS name is False here (resolve it and ask again for
    each address)."""
    name = host.strip("[]").lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        address: Any = ipaddress.ip_address(name)
    except ValueError:
        return False
    if getattr(address, "ipv4_mapped", None) is not None:
        address = address.ipv4_mapped
    return not address.is_global or address.is_multicast
