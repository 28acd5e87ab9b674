"""What every command shares: its settings (file + env + flags), its Redis URL, its client.

Settings come from, in rising precedence: defaults, the TOML file
(``--config`` or ``$WHEELQ_CONFIG``), environment variables
(``WHEELQ_<SECTION>_<KEY>``), flags; see `wheelq.cli.config`.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from wheelq.cli.config import check_environment, from_environment, load_config
from wheelq.cli.errors import usage_error

if TYPE_CHECKING:
    from wheelq.producer.client import Client

ENVIRONMENT = {
    "WHEELQ_CONFIG": "the TOML settings file when --config is not given",
    "WHEELQ_LOG_LEVEL": "the log level when --log-level is not given (default INFO)",
    "WHEELQ_REDIS_URL": "the Redis URL when --redis-url is not given",
    "WHEELQ_SCHEDULER_TOPICS": "the scheduler's topics, comma-separated (or WHEELQ_TOPICS)",
    "WHEELQ_<SECTION>_<KEY>": "any key of the config file, e.g. WHEELQ_WORKER_CONCURRENCY=20",
}


@dataclass
class Context:
    """The parsed command line with its config file and environment: what a command reads
    its settings from."""

    args: argparse.Namespace
    config: dict[str, dict[str, Any]] = field(default_factory=dict)
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)

    @classmethod
    def load(cls, args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> Context:
        """Check the environment's ``WHEELQ_*`` names, then read and check the config file
        named by ``--config`` or ``$WHEELQ_CONFIG``.

        Args:
            args: The parsed command line.
            environ: Default `os.environ`.

        Raises:
            CliError: (exit 2) An unknown ``WHEELQ_<SECTION>_*`` variable, or a config file
                that cannot be read or names an unknown section or key.
        """
        environ = os.environ if environ is None else environ
        check_environment(environ)
        path = getattr(args, "config", None) or environ.get("WHEELQ_CONFIG")
        return cls(args, load_config(path) if path else {}, environ)

    def section(self, name: str, **flags: Any) -> dict[str, Any]:
        """The values of one section: the file's, then the environment's over them, then
        `flags` (the command's options; None means not given) over both.

        Only the values that win are parsed: a variable a flag overrides is not read.

        Raises:
            InvalidArgumentError: (exit 2) A variable's value is not an int in its range.
            CliError: (exit 2) A variable's value is not valid for its key.
        """
        given = {key: value for key, value in flags.items() if value is not None}
        values = dict(self.config.get(name, {}))
        values.update(from_environment(self.environ, name, skip=given.keys()))
        values.update(given)
        return values

    def given_redis_url(self) -> str | None:
        """``--redis-url``, else ``$WHEELQ_REDIS_URL``, else ``[redis] url``, else None.

        Raises:
            CliError: (exit 2) A URL redis-py cannot parse (see `check_url`).
        """
        url = self.section("redis", url=getattr(self.args, "redis_url", None) or None).get("url")
        if url and not isinstance(url, str):
            raise usage_error(f"[redis] url must be a string, got {url!r}")
        return check_url(url) if url else None

    def redis_url(self) -> str:
        """`given_redis_url`, required.

        Raises:
            CliError: (exit 2) No URL given, or a bad one.
        """
        url = self.given_redis_url()
        if url is None:
            raise usage_error("--redis-url (or WHEELQ_REDIS_URL, or [redis] url) is required")
        return url

    @contextmanager
    def client(self) -> Iterator[Client]:
        """A `Client` on the Redis URL with the ``[client]`` settings, closed afterwards.

        The settings are resolved before it connects, so a bad one starts nothing.
        """
        from wheelq.producer.client import Client

        url, settings = self.redis_url(), self.section("client")
        with Client.from_url(url, **settings) as client:
            yield client


def redacted(url: str) -> str:
    """`url` with its password (everything before the last ``@`` after the user) as ``***``."""
    scheme, sep, rest = url.partition("://")
    userinfo, at, host = rest.rpartition("@")
    if not at:
        return url
    user, colon, _ = userinfo.partition(":")
    return f"{scheme}{sep}{user + colon if colon else ''}***@{host}"


def url_hint(url: str | None) -> str:
    """Advice when `url` looks like it has unencoded special characters in its credentials."""
    rest = (url or "").partition("://")[2]
    if "@" not in rest:
        return ""
    try:
        in_netloc = "@" in urlsplit(url).netloc
    except ValueError:
        in_netloc = False
    if rest.count("@") > 1 or not in_netloc:
        return (
            "; special characters in the user name or password must be percent-encoded "
            "(@ as %40, / as %2F, : as %3A)"
        )
    return ""


def check_url(url: str) -> str:
    """Return `url` if redis-py can parse it.

    Raises:
        CliError: (exit 2) A scheme other than redis, rediss or unix, a bad port, or an
            ``@`` after the host (a password with an unencoded ``/``, ``?`` or ``#``).
    """
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (parsing it raises ValueError on a bad port)
    except ValueError as exc:
        raise usage_error(f"bad Redis URL {redacted(url)}: {exc}{url_hint(url)}") from exc
    if "@" in parts.path + parts.query + parts.fragment:
        raise usage_error(f"bad Redis URL {redacted(url)}: an '@' after the host{url_hint(url)}")
    if parts.scheme not in {"redis", "rediss", "unix"}:
        raise usage_error(
            f"a Redis URL starts with redis://, rediss:// or unix://, got {redacted(url)}"
        )
    return url
