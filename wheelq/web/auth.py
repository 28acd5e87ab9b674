"""Who may do what: bearer tokens, each limited to topics and to reading or writing.

With no token configured every request is let in (the CLI then binds to loopback only).
With tokens, a request names one as ``Authorization: Bearer <token>``, or as the password
of HTTP Basic auth (what a browser asks for on the dashboard); tokens are compared in
constant time. ``read`` grants the GET endpoints, the dashboard and ``/metrics``;
``write`` grants everything (pulling and acking included). ``topics`` are shell-style
patterns (``orders-*``); a token without them covers every topic.
"""

from __future__ import annotations

import base64
import binascii
import fnmatch
import hmac
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from fastapi import Request

from wheelq.errors import InvalidArgumentError
from wheelq.web.problems import ProblemError

ACCESS = ("read", "write")


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
    """Tokens from config: a list of tables ``{token, access?, topics?}``, a list of token
    strings (write access to everything), a comma-separated string of them, or that list
    as JSON text (an environment variable).

    Raises:
        InvalidArgumentError: Naming `source` and what is wrong.
    """
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


class Guard:
    """Checks a request's token against the configured ones."""

    def __init__(self, tokens: Iterable[Token]) -> None:
        self.tokens = tuple(tokens)

    @property
    def open(self) -> bool:
        return not self.tokens

    def token_of(self, request: Request) -> Token | None:
        """The request's token; see `token_in`."""
        return self.token_in(request.headers.get("authorization", ""))

    def token_in(self, authorization: str) -> Token | None:
        """The request's token (None when none is configured).

        Raises:
            ProblemError: 401 when the request names no configured token.
        """
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
        """See `allows`."""
        return self.allows(request.headers.get("authorization", ""), access, topic)

    def allows(self, authorization: str, access: str, topic: str | None = None) -> Token | None:
        """The token of an ``Authorization`` header if it grants `access` on `topic` (None:
        any topic).

        Raises:
            ProblemError: 401 (no token) or 403 (it does not grant this).
        """
        token = self.token_in(authorization)
        if token is not None and not (token.grants(access) and token.covers(topic)):
            where = f" on topic {topic!r}" if topic else ""
            detail = f"the token does not grant {access}{where}"
            raise ProblemError(403, "forbidden", "Forbidden", detail)
        return token


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
