"""What every command shares: its settings (file + env + flags), its errors, its client.

Settings come from, in rising precedence: defaults, the TOML file
(``--config`` or ``$WHEELQ_CONFIG``), environment variables, flags. The
file's sections and keys are checked against the settings dataclasses, so a
setting added there is accepted here without a change.
"""

from __future__ import annotations

import argparse
import os
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from wheelq.core.settings import ClientSettings, SchedulerSettings, WorkerSettings

if TYPE_CHECKING:
    from wheelq.producer.client import Client

ENVIRONMENT = {
    "WHEELQ_REDIS_URL": "the Redis URL when --redis-url is not given",
    "WHEELQ_CONFIG": "the TOML settings file when --config is not given",
    "WHEELQ_TOPICS": "the scheduler's topics when --topics is not given (comma-separated)",
    "WHEELQ_LOG_LEVEL": "the log level when --log-level is not given (default INFO)",
}

# Keys the CLI itself reads, beside the fields of each section's settings class.
_CLI_KEYS = {"redis": {"url"}, "scheduler": {"topics"}, "worker": {"group", "start"}}
_SETTINGS = {"client": ClientSettings, "scheduler": SchedulerSettings, "worker": WorkerSettings}
SECTIONS: dict[str, frozenset[str]] = {
    "redis": frozenset(_CLI_KEYS["redis"]),
    **{
        name: frozenset(_CLI_KEYS.get(name, set()) | {f.name for f in fields(cls)})
        for name, cls in _SETTINGS.items()
    },
}


class CliError(Exception):
    """A command that cannot go on: main() prints the message on one line, exits `code`."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def usage_error(message: str) -> CliError:
    """A command line or config that cannot run (exit status 2)."""
    return CliError(message, 2)


@dataclass
class Context:
    """The parsed command line with its config file: what a command reads its settings from."""

    args: argparse.Namespace
    config: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def load(cls, args: argparse.Namespace) -> Context:
        """Read and check the config file named by ``--config`` or ``$WHEELQ_CONFIG``."""
        path = getattr(args, "config", None) or os.environ.get("WHEELQ_CONFIG")
        return cls(args, load_config(path) if path else {})

    def section(self, name: str) -> dict[str, Any]:
        """A copy of one section of the config file (empty when absent)."""
        return dict(self.config.get(name, {}))

    def given_redis_url(self) -> str | None:
        """``--redis-url``, else ``$WHEELQ_REDIS_URL``, else ``[redis] url``, else None.

        Raises:
            CliError: (exit 2) A URL redis-py cannot parse (see `check_url`).
        """
        url = (
            getattr(self.args, "redis_url", None)
            or os.environ.get("WHEELQ_REDIS_URL")
            or self.section("redis").get("url")
        )
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
        """A `Client` on the Redis URL with the ``[client]`` settings, closed afterwards."""
        from wheelq.producer.client import Client

        with Client.from_url(self.redis_url(), **self.section("client")) as client:
            yield client


def load_config(path: str) -> dict[str, dict[str, Any]]:
    """Read a TOML settings file and check its sections and keys.

    Raises:
        CliError: (exit 2) The file cannot be read, is not TOML, or has a section or
            key wheelq does not know; the message names the file, section and key.
    """
    try:
        with open(path, "rb") as f:
            config = tomllib.load(f)
    except OSError as exc:
        raise usage_error(f"cannot read config file {path}: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise usage_error(f"config file {path} is not valid TOML: {exc}") from exc
    known = ", ".join(f"[{name}]" for name in SECTIONS)
    for name, section in config.items():
        if not isinstance(section, dict):
            raise usage_error(f"{path}: key {name!r} is outside any section; sections: {known}")
        if name not in SECTIONS:
            raise usage_error(f"{path}: unknown section [{name}]; known: {known}")
        for key in section:
            if key not in SECTIONS[name]:
                raise usage_error(
                    f"{path}: unknown key {key!r} in [{name}]; "
                    f"known: {', '.join(sorted(SECTIONS[name]))}"
                )
    return config


def split_topics(value: object, source: str) -> list[str]:
    """Topics from ``"a, b"`` or ``["a", "b"]``: spaces trimmed, empty entries dropped.

    Raises:
        CliError: (exit 2) Not a string or a list of strings, or no topic at all.
    """
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(t, str) for t in items):
        raise usage_error(f"{source} must be comma-separated topics or a list, got {value!r}")
    topics = [t.strip() for t in items if t.strip()]
    if not topics:
        raise usage_error(f"{source} names no topic (leave it out to serve every topic)")
    return topics


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
