"""A job's HTTP callback: where `wheelq deliver` POSTs the job when due; a msgpack map
``{"url", "headers", "timeout_ms"}`` on the wire. Whether a host is private (SSRF) is
decided where the URL is used (docs/security.md).
"""

from __future__ import annotations

import functools
import ipaddress
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import msgpack

from wheelq.errors import InvalidArgumentError, int_in

MAX_URL_CHARS = 2048
MAX_HEADERS = 32
MAX_HEADER_CHARS = 4096  # the longest header value
TIMEOUT_MS_RANGE = (1, 300_000)
DEFAULT_TIMEOUT_MS = 10_000
RESERVED_HEADERS = frozenset({"content-type", "content-length", "host", "transfer-encoding"})
"""Header names the deliverer sets itself (and every ``wheelq-`` name)."""
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,256}$")
"""An HTTP header name (RFC 9110 token)."""
_LABEL = re.compile(r"^[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$")
"""One label of a host name, after IDNA (underscores occur in real names)."""
_NUMBER = re.compile(r"^([0-9]+|0x[0-9a-f]*)$")
"""A label an IPv4 parser reads as a number (WHATWG URL, "ends in a number")."""
_DOTS = str.maketrans({"\u3002": ".", "\uff0e": ".", "\uff61": "."})
"""The full stops IDNA reads as label separators (NFKC maps U+FF0E and U+FF61 too)."""


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
        return callback_host(self.url)

    def pack(self) -> bytes:
        packed: bytes = msgpack.packb(
            {"url": self.url, "headers": dict(self.headers), "timeout_ms": self.timeout_ms},
            use_bin_type=False,
        )
        return packed

    @classmethod
    def unpack(cls, data: bytes) -> Callback:
        """Decode and check a packed callback, else ValueError (cached: a deliverer's hot path)."""
        return _unpack(data)


CallbackArg = Callback | str | Mapping[str, Any] | None
"""What a `callback=` parameter takes: a `Callback`, its URL alone, or its fields as a dict."""


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
    """A checked `Callback` from a `Callback`, a URL or a mapping; errors name the field."""
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
            value["url"], value.get("headers") or {}, value.get("timeout_ms", DEFAULT_TIMEOUT_MS)
        )
    elif not isinstance(value, Callback):
        raise InvalidArgumentError(
            "callback",
            f"callback must be a Callback, a URL or a mapping, got {type(value).__name__}",
        )
    _check_url(value.url)
    _check_headers(value.headers)
    timeout = int_in("callback.timeout_ms", value.timeout_ms, *TIMEOUT_MS_RANGE)
    return Callback(value.url, dict(value.headers), timeout)


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
    why = undeliverable(callback_host(url), bracketed="[" in parts.netloc)
    if why:
        raise bad(f"with a host an HTTP client can reach ({why})")


def callback_host(url: str) -> str:
    """The host of `url` as aiohttp connects to it (IDNA-mapped, IPv6 without brackets)."""
    try:
        raw = urlsplit(url).hostname or ""
    except ValueError:
        return ""
    return _normal_host(raw)


def _normal_host(host: str) -> str:
    if ":" in host:  # an IPv6 literal
        try:
            return ipaddress.IPv6Address(host).compressed
        except ValueError:
            return host.lower()
    if host.isascii():
        return host.lower()
    host = unicodedata.normalize("NFKC", host).translate(_DOTS).lower()
    if not host.isascii():
        try:
            host = host.encode("idna").decode("ascii")
        except UnicodeError:
            return host  # `undeliverable` refuses it
    return host


def undeliverable(host: str, *, bracketed: bool = False) -> str:
    """Why no HTTP client can deliver to `host` (non-canonical IPv4, bad IPv6, not DNS), or ""."""
    if "%" in host:
        return f"{host} is percent-encoded"
    if bracketed or ":" in host:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return f"[{host}] is not an IPv6 address"
        return ""
    labels = host.removesuffix(".").split(".")
    if _NUMBER.match(labels[-1]):
        try:
            canonical = str(ipaddress.IPv4Address(host)) == host
        except ValueError:
            canonical = False
        if not canonical:
            return f"{host} is not a canonical IPv4 address (four decimal numbers 0-255)"
        return ""
    if len(host) > 253 or not all(_LABEL.match(label) for label in labels):
        return f"{host} is not a host name"
    return ""


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
    """Whether `host` (an IP literal or ``localhost``) is not public; a DNS name is False.

    An IPv6 address carrying an IPv4 one (mapped, compatible, NAT64, 6to4) is judged by it.
    """
    name = _normal_host(host.strip("[]")).rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        address: Any = ipaddress.ip_address(name)
    except ValueError:
        return bool(name) and ":" not in name and bool(undeliverable(name))
    if address.version == 6:
        if address.is_site_local or address in _LOCAL_NAT64:
            return True
        address = _embedded_ipv4(address) or address
    return not address.is_global or address.is_multicast


_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_LOCAL_NAT64 = ipaddress.IPv6Network("64:ff9b:1::/48")
"""Local-use NAT64 (RFC 8215): translates to the operator's own networks."""
_COMPATIBLE = ipaddress.IPv6Network("::/96")


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address a packet to `address` ends up at, for the forms that carry one."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in _NAT64 or (address in _COMPATIBLE and int(address) > 1):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address.sixtofour
