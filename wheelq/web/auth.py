"""Who may do what: bearer tokens (or HTTP Basic passwords), each limited to topics and to
reading or writing, the ``Host`` check and the cross-site check (docs/security.md).
`Guard.admit` checks every request before its body is read; the routes check again, for the
token they use.
"""

from __future__ import annotations

import base64
import binascii
import fnmatch
import hmac
import ipaddress
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from fastapi import Request
from starlette.types import Scope

from wheelq.errors import InvalidArgumentError
from wheelq.web.problems import ProblemError

ACCESS = ("read", "write")
ANY_HOST = "*"
"""An `allowed_hosts` entry that lets any ``Host`` in (behind a proxy that checks it)."""
READS = frozenset({"GET", "HEAD", "OPTIONS"})
"""The methods that change nothing; every other one is refused cross-site."""
SAME_SITE = frozenset({"same-origin", "none"})
"""``Sec-Fetch-Site`` values of a request a browser did not send from another origin (none:
the user's own doing, such as a typed address)."""
_DEFAULT_PORTS = {"http": ":80", "https": ":443"}
_GUARDED = re.compile(r"/(?:v1|ui)(?:/topics/([^/]+))?(?:/.*)?|/metrics")
_STATIC = "/ui/static/"


@dataclass(frozen=True, slots=True)
class Token:
    """One token: its secret, what it grants (read or write) and on which topics."""

    token: str
    access: str = "write"
    topics: tuple[str, ...] = ()
    """Shell-style patterns; empty: every topic."""

    def covers(self, topic: str | None) -> bool:
        return (
            topic is None
            or not self.topics
            or any(fnmatch.fnmatchcase(topic, p) for p in self.topics)
        )

    def grants(self, access: str) -> bool:
        return self.access == "write" or access == "read"


def parse_tokens(value: object, source: str) -> tuple[Token, ...]:
    """Tokens from config: tables ``{token, access?, topics?}`` or token strings (write,
    every topic), as a list, JSON text or comma-separated."""
    if isinstance(value, str):
        text = value.strip()
        value = json.loads(text) if text.startswith("[") else [t for t in text.split(",") if t]
    if not isinstance(value, list):
        raise InvalidArgumentError(source, f"{source} must be a list of tokens, got {value!r:.60}")
    out = []
    for i, given in enumerate(value):
        where = f"{source}[{i}]"
        item = {"token": given} if isinstance(given, str) else given
        if not isinstance(item, Mapping) or set(item) - {"token", "access", "topics"}:
            raise InvalidArgumentError(
                where, f"{where} must be a token or a table of token, access, topics"
            )
        secret, access, topics = (
            item.get("token"),
            item.get("access", "write"),
            item.get("topics", []),
        )
        if not isinstance(secret, str) or len(secret.strip()) < 16:
            raise InvalidArgumentError(where, f"{where}: token must be a str of 16+ characters")
        if access not in ACCESS:
            raise InvalidArgumentError(where, f"{where}: access must be read or write")
        if not isinstance(topics, list) or not all(isinstance(t, str) and t for t in topics):
            raise InvalidArgumentError(where, f"{where}: topics must be a list of patterns")
        out.append(Token(secret.strip(), access, tuple(topics)))
    return tuple(out)


def needs(method: str, path: str) -> tuple[str, str | None] | None:
    """(access, topic) a request needs (topic None: every one); None for the open paths."""
    found = _GUARDED.fullmatch(path)
    if found is None or path.startswith(_STATIC):
        return None
    return ("read" if method in READS else "write"), found[1]


def host_names(hosts: Iterable[str], source: str) -> tuple[str, ...]:
    """``allowed_hosts`` from config: names (or addresses) as a list, or comma-separated."""
    if isinstance(hosts, str):
        hosts = [h for h in hosts.split(",") if h.strip()]
    out = []
    for i, given in enumerate(hosts):
        name = given.strip().lower().rstrip(".") if isinstance(given, str) else None
        if not name or (name != ANY_HOST and not _NAME.fullmatch(name.strip("[]"))):
            raise InvalidArgumentError(
                source, f"{source}[{i}] must be a host name or address, got {given!r:.80}"
            )
        out.append(name.strip("[]"))
    return tuple(out)


_NAME = re.compile(r"[a-z0-9._:\-]{1,253}")


class Guard:
    """Checks a request's ``Host`` and token against the configured ones.

    Args:
        tokens: Who may do what (none: everyone, everything).
        allowed_hosts: Names (or addresses) accepted in ``Host`` besides the address the
            request came in on (and ``localhost`` when that is a loopback address);
            ``*``: any.
    """

    def __init__(self, tokens: Iterable[Token], allowed_hosts: Iterable[str] = ()) -> None:
        self.tokens = tuple(tokens)
        self.allowed_hosts = frozenset(allowed_hosts)

    def admit(self, scope: Scope) -> None:
        """Check a request's ``Host`` (421), that a browser did not send a state-changing
        request from another site (403, `check_site`), then its token for what it `needs`
        (401, 403)."""
        headers = dict(scope["headers"])
        self.check_host(headers.get(b"host"), scope.get("server"))
        if scope["method"] not in READS:
            check_site(headers, scope.get("scheme", "http"))
        if self.tokens:
            path, root = scope["path"], scope.get("root_path", "")
            need = needs(scope["method"], path[len(root) :] if path.startswith(root) else path)
            if need is not None:
                authorization = headers.get(b"authorization", b"").decode("latin-1")
                self.allows(authorization, *need)

    def check_host(self, host: bytes | None, server: tuple[str, int | None] | None) -> None:
        """421 unless ``Host`` is the address the request came in on (`server`; with its
        port or none), ``localhost`` on loopback, or in `allowed_hosts` (any port). None
        (HTTP/1.0) passes: browsers always send one."""
        if host is None or ANY_HOST in self.allowed_hosts:
            return
        text = host.decode("latin-1").strip().lower()
        name, port = _split_host(text)
        name = name.rstrip(".")
        if name in self.allowed_hosts:
            return
        if server is not None and (port is None or port == server[1]):
            address = server[0].lower()
            if name == address or (_loopback(address) and (name == "localhost" or _loopback(name))):
                return
        raise ProblemError(
            421,
            "misdirected",
            "Misdirected request",
            f"Host {text!r:.100} is not a name of this service: it answers to the address it "
            "is bound to (and localhost on loopback) and to [serve] allowed_hosts",
            field="Host",
        )

    @property
    def open(self) -> bool:
        return not self.tokens

    def token_of(self, request: Request) -> Token | None:
        return self.token_in(request.headers.get("authorization", ""))

    def token_in(self, authorization: str) -> Token | None:
        """The request's token (None when none is configured); 401 when it names none."""
        if not self.tokens:
            return None
        given = _presented(authorization)
        if given is not None:
            found = None
            for token in self.tokens:  # every one compared: no early exit to time
                if hmac.compare_digest(token.token.encode(), given.encode()):
                    found = token
            if found is not None:
                return found
        raise ProblemError(
            401,
            "unauthorized",
            "Unauthorized",
            "send a configured token as 'Authorization: Bearer <token>'",
            headers={"WWW-Authenticate": 'Bearer, Basic realm="wheelq"'},
        )

    def check(self, request: Request, access: str, topic: str | None = None) -> Token | None:
        return self.allows(request.headers.get("authorization", ""), access, topic)

    def allows(self, authorization: str, access: str, topic: str | None = None) -> Token | None:
        """The header's token if it grants `access` on `topic` (None: any); else 401, 403."""
        token = self.token_in(authorization)
        if token is not None and not (token.grants(access) and token.covers(topic)):
            where = f" on topic {topic!r}" if topic else ""
            detail = f"the token does not grant {access}{where}"
            raise ProblemError(403, "forbidden", "Forbidden", detail)
        return token


def check_site(headers: Mapping[bytes, bytes], scheme: str, required: bool = False) -> None:
    """403 unless a request comes from the service's own origin, when a browser says where it
    comes from: ``Sec-Fetch-Site`` (when sent) must be ``same-origin`` or ``none``, and
    ``Origin`` (when sent) must be exactly the origin the request was sent to, `scheme`
    ``://`` its ``Host`` (``null``, another scheme, port or spelling of the name, user info:
    refused). A request with neither (curl, a server's client) passes unless `required`
    (the dashboard's forms, which may name their page in ``Referer`` instead of ``Origin``).
    """
    fetch = headers.get(b"sec-fetch-site")
    if fetch is not None and fetch.decode("latin-1").strip().lower() not in SAME_SITE:
        said = fetch.decode("latin-1")
        raise _cross_site(f"Sec-Fetch-Site is {said!r:.40}: the browser sent it from another site")
    origin = headers.get(b"origin")
    if origin is None and required:
        referer = headers.get(b"referer")
        if referer is None:
            raise _cross_site("a dashboard form must name its page in Origin or Referer")
        parts = urlsplit(referer.decode("latin-1"))
        origin = f"{parts.scheme}://{parts.netloc}".encode("latin-1")
    if origin is None:
        return
    host = headers.get(b"host")
    given = origin.decode("latin-1")
    own = None if host is None else own_origin(scheme, host.decode("latin-1"))
    if given != own:
        raise _cross_site(f"Origin {given!r:.100} is not this service's own ({own!r:.100})")


def own_origin(scheme: str, host: str) -> str:
    """The origin a browser names for a page of `scheme` and ``Host`` `host` (RFC 6454: lower
    case, no default port)."""
    name = host.strip().lower()
    default = _DEFAULT_PORTS.get(scheme)
    if default is not None and name.endswith(default):
        name = name[: -len(default)]
    return f"{scheme}://{name}"


def _cross_site(what: str) -> ProblemError:
    return ProblemError(
        403,
        "cross-origin",
        "Forbidden",
        "a request that changes something is accepted only from this service's own pages "
        f"or from a client that is not a browser: {what}",
    )


def _split_host(host: str) -> tuple[str, int | None]:
    """(name, port) of a ``Host`` value: ``[::1]:8080``, ``name:80``, ``name``."""
    if host.startswith("["):
        name, _, rest = host[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif host.count(":") == 1:
        name, _, port = host.partition(":")
    else:
        name, port = host, ""
    return name, int(port) if port.isdigit() and len(port) <= 5 else (None if not port else -1)


def _loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def _presented(header: str) -> str | None:
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer":
        return value.strip() or None
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(value.strip(), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return None
        return decoded.partition(":")[2] or None
    return None
