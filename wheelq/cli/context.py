"""What every command shares: its settings, its Redis URL, its client, and its error.

Settings, in rising precedence: defaults, the TOML file, ``WHEELQ_<SECTION>_<KEY>``
variables, flags; an unknown key or variable is refused, so a misspelt one is not ignored.
"""

from __future__ import annotations

import argparse
import errno
import os
import socket
import tomllib
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from wheelq.core.settings import (
    CallbackSettings,
    ClientSettings,
    Range,
    RelaySettings,
    SchedulerSettings,
    ServeSettings,
    WorkerSettings,
    setting_ranges,
)

if TYPE_CHECKING:
    from wheelq.admin.admin import Admin
    from wheelq.producer.client import Client


class CliError(Exception):
    """A command that cannot go on: main() prints the message on one line, exits `code`."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def usage_error(message: str) -> CliError:
    """A command line, config file or environment that cannot run (exit status 2)."""
    return CliError(message, 2)


def no_such_topic(topic: str, names: list[str]) -> CliError:
    """`topic` is not one of `names` (the topics there are), said as every command says it."""
    known = f"topics: {', '.join(names[:20])}{' ...' if len(names) > 20 else ''}"
    return CliError(f"no such topic {topic!r} ({known if names else 'there are no topics'})")


def cannot_read(topic: str, exc: Exception) -> str:
    """A topic Redis cannot read (a key of it holds another type), said as every listing of
    topics says it: the topic is listed so, the others as usual."""
    return f"topic {topic} cannot be read: {type(exc).__name__}: {exc}"


def check_free(host: str, port: int) -> None:
    """Refuse, before anything starts, a port that cannot be listened on (one taken would
    pass another server's answers for the new one's): exit 1, suggesting ``--port``."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            taken = exc.errno == errno.EADDRINUSE
            hint = " (pick another port with --port)" if taken else ""
            raise CliError(f"cannot listen on {host}:{port}: {exc.strerror or exc}{hint}") from exc


def command(
    sub: Any,
    name: str,
    parents: list[argparse.ArgumentParser],
    help: str,
    func: Callable[[Context], int],
    *positionals: str,
) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(name, parents=parents, help=help)
    for positional in positionals:
        p.add_argument(positional)
    p.set_defaults(func=func)
    return p


SETTINGS: dict[str, type] = {
    "client": ClientSettings,
    "scheduler": SchedulerSettings,
    "worker": WorkerSettings,
    "serve": ServeSettings,
    "callbacks": CallbackSettings,
    "relay": RelaySettings,
}
CLI_KEYS: dict[str, tuple[str, ...]] = {
    "redis": ("url",),
    "scheduler": ("topics", "metrics_port", "metrics_host"),
    "worker": ("group", "start", "metrics_port", "metrics_host"),
    "serve": ("host", "tokens", "deliver", "allowed_hosts", "receipt_secret", "prometheus_url"),
    "callbacks": ("signing_secret", "allow_private", "group"),
    "relay": ("dsn", "ack", "metrics_port", "metrics_host"),
}
CLI_RANGES: dict[str, Range] = {"metrics_port": Range(0, 65535)}  # 0: no metrics server


@dataclass(frozen=True, slots=True)
class KeyDoc:
    """How the configuration reference describes a key only the CLI reads (the settings
    classes document theirs in their attribute docstrings)."""

    default: str
    accepted: str
    description: str


_METRICS_PORT = KeyDoc(
    "0 (off)", "[0, 65535]", "Serve Prometheus metrics on ``http://HOST:PORT/metrics``; 0: off."
)
_METRICS_HOST = KeyDoc(
    "``0.0.0.0``",
    "an address or host name",
    "HOST the metrics listen on: ``0.0.0.0`` is every IPv4 interface, ``127.0.0.1`` this "
    "machine only.",
)
CLI_KEY_DOCS: dict[tuple[str, str], KeyDoc] = {
    ("redis", "url"): KeyDoc(
        "none (required)",
        "a ``redis://``, ``rediss://`` (TLS) or ``unix://`` URL",
        "The Redis URL, ``redis://[user:password@]host:port/db``; percent-encode ``@ / :`` "
        "in the user name and password.",
    ),
    ("scheduler", "topics"): KeyDoc(
        "every topic, new ones too",
        "topic names, comma-separated (a list in the file)",
        "The topics this node serves. ``WHEELQ_TOPICS`` is an older name of its variable.",
    ),
    ("scheduler", "metrics_port"): _METRICS_PORT,
    ("scheduler", "metrics_host"): _METRICS_HOST,
    ("worker", "group"): KeyDoc(
        "``default``", "a consumer group name", "The consumer group of ``wheelq worker``."
    ),
    ("worker", "start"): KeyDoc(
        "``earliest``",
        "``earliest`` or ``now``",
        "Where a new group starts: every entry still in the stream, or only jobs fired from "
        "now on.",
    ),
    ("worker", "metrics_port"): _METRICS_PORT,
    ("worker", "metrics_host"): _METRICS_HOST,
    ("serve", "host"): KeyDoc(
        "``127.0.0.1``",
        "an address or host name",
        "The address to bind; anything but loopback needs tokens.",
    ),
    ("serve", "tokens"): KeyDoc(
        "none (the API is open, and bound to loopback only)",
        "tokens, comma-separated, or a list of ``{token, access, topics}`` (JSON in the variable)",
        "Who may call the API: access ``write`` grants everything, ``read`` the GETs, the "
        "dashboard and ``/metrics``; topics are patterns (none: all). A bare token has write "
        "access to every topic.",
    ),
    ("serve", "deliver"): KeyDoc(
        "every topic that has had a job with a callback",
        "topics, comma-separated (a list in the file), or ``none``",
        "The topics whose callbacks ``wheelq serve`` delivers.",
    ),
    ("serve", "allowed_hosts"): KeyDoc(
        "none (the bound address; ``localhost`` on loopback)",
        "host names, comma-separated (a list in the file); ``*``: any",
        "Names accepted in the ``Host`` header besides the bound address (421 otherwise).",
    ),
    ("serve", "receipt_secret"): KeyDoc(
        "none (a random key kept in Redis, ``wheelq:receipt_key``)",
        "a string",
        "The HMAC key of pull receipts, the same on every instance.",
    ),
    ("serve", "prometheus_url"): KeyDoc(
        "none (charts from the service's own samples, taken since it started)",
        "an http(s) URL",
        "A Prometheus that scrapes the roles: the dashboard's charts come from it.",
    ),
    ("callbacks", "signing_secret"): KeyDoc(
        "none (unsigned, warned of once a topic's callbacks are delivered)",
        "a string",
        "The HMAC-SHA256 key of the ``Wheelq-Signature`` header.",
    ),
    ("callbacks", "allow_private"): KeyDoc(
        "false",
        "``true`` or ``false``",
        "Whether callbacks may target private, loopback and link-local addresses (SSRF).",
    ),
    ("relay", "dsn"): KeyDoc(
        "none (no relay; ``wheelq relay`` requires it)",
        "a libpq URL or ``key=value`` string: ``postgresql://user:password@host:5432/db``",
        "The PostgreSQL whose outbox the relay moves into Redis. Set in a scheduler's file, "
        "``wheelq scheduler`` runs the relay beside the node.",
    ),
    ("relay", "ack"): KeyDoc(
        "``primary``",
        "``primary``, ``replicated`` or ``persisted``",
        "What Redis confirms before the relay deletes the rows it placed (as ``enqueue``'s "
        "``ack``).",
    ),
    ("relay", "metrics_port"): _METRICS_PORT,
    ("relay", "metrics_host"): _METRICS_HOST,
    ("callbacks", "group"): KeyDoc(
        "``callbacks``", "a consumer group name", "The deliverer's consumer group."
    ),
}
SECTIONS: dict[str, tuple[str, ...]] = {
    "redis": CLI_KEYS["redis"],
    **{name: CLI_KEYS.get(name, ()) + tuple(setting_ranges(cls)) for name, cls in SETTINGS.items()},
}  # the CLI's own keys first, then the settings fields in their order
ALIASES: dict[str, tuple[str, str]] = {"WHEELQ_TOPICS": ("scheduler", "topics")}  # older names
STARTS = ("earliest", "now")


def env_name(section: str, key: str) -> str:
    return f"WHEELQ_{section}_{key}".upper()


def check_environment(environ: Mapping[str, str]) -> None:
    """Refuse (exit 2) a ``WHEELQ_<SECTION>_*`` variable that names no key of that section."""
    for var in sorted(environ):
        for section, keys in SECTIONS.items():
            names = [env_name(section, key) for key in keys]
            if var.startswith(f"WHEELQ_{section.upper()}_") and var not in names:
                raise usage_error(
                    f"unknown environment variable {var}; [{section}] has {', '.join(names)}"
                )


def from_environment(
    environ: Mapping[str, str], section: str, skip: Collection[str] = ()
) -> dict[str, Any]:
    """The keys of `section` set in `environ` (not those in `skip`), parsed and checked."""
    ranges = {**(setting_ranges(SETTINGS[section]) if section in SETTINGS else {}), **CLI_RANGES}
    out: dict[str, Any] = {}
    for key in SECTIONS[section]:
        if key in skip:
            continue
        found = _lookup(environ, section, key)
        if found is None:
            continue
        var, text = found
        if key in ranges:
            try:
                value = int(text)
            except ValueError:
                raise ranges[key].error(var, text) from None
            ranges[key].check(var, value)
            out[key] = value
        elif key == "topics":
            out[key] = split_topics(text, var)
        elif key == "start" and text not in STARTS:
            raise usage_error(f"{var} must be one of {', '.join(STARTS)}, got {text!r}")
        else:
            out[key] = text
    return out


def _lookup(environ: Mapping[str, str], section: str, key: str) -> tuple[str, str] | None:
    """The first non-empty of the key's variable and its older names: (name, value)."""
    older = [name for name, target in ALIASES.items() if target == (section, key)]
    for var in (env_name(section, key), *older):
        if environ.get(var):
            return var, environ[var]
    return None


def load_config(path: str) -> dict[str, dict[str, Any]]:
    """Read a TOML settings file; exit 2 naming the file, section and key on a mistake."""
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
    """Topics from ``"a, b"`` or ``["a", "b"]``, trimmed; exit 2 when there are none."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(t, str) for t in items):
        raise usage_error(f"{source} must be comma-separated topics or a list, got {value!r}")
    topics = [t.strip() for t in items if t.strip()]
    if not topics:
        raise usage_error(f"{source} names no topic (leave it out to serve every topic)")
    return topics


ENVIRONMENT = {
    "WHEELQ_CONFIG": "the TOML settings file when --config is not given",
    "WHEELQ_LOG_LEVEL": "the log level when --log-level is not given (default INFO)",
    "WHEELQ_REDIS_URL": "the Redis URL when --redis-url is not given",
    "WHEELQ_SCHEDULER_TOPICS": "the scheduler's topics, comma-separated (or WHEELQ_TOPICS)",
    "WHEELQ_<SECTION>_<KEY>": "any key of the config file, e.g. WHEELQ_WORKER_CONCURRENCY=20",
}


@dataclass
class Context:
    """The parsed command line with its config file and environment."""

    args: argparse.Namespace
    config: dict[str, dict[str, Any]] = field(default_factory=dict)
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)

    @classmethod
    def load(cls, args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> Context:
        """Check the ``WHEELQ_*`` names, then read the config file (exit 2 on an unknown name)."""
        environ = os.environ if environ is None else environ
        check_environment(environ)
        path = getattr(args, "config", None) or environ.get("WHEELQ_CONFIG")
        return cls(args, load_config(path) if path else {}, environ)

    def section(self, name: str, **flags: Any) -> dict[str, Any]:
        """One section's values: the file's, the environment's, then `flags` (None: not given)."""
        given = {key: value for key, value in flags.items() if value is not None}
        values = dict(self.config.get(name, {}))
        values.update(from_environment(self.environ, name, skip=given.keys()))
        values.update(given)
        return values

    def given_redis_url(self) -> str | None:
        """``--redis-url``, else ``$WHEELQ_REDIS_URL``, else ``[redis] url``, else None."""
        url = self.section("redis", url=getattr(self.args, "redis_url", None) or None).get("url")
        if url and not isinstance(url, str):
            raise usage_error(f"[redis] url must be a string, got {url!r}")
        return check_url(url) if url else None

    def redis_url(self) -> str:
        url = self.given_redis_url()
        if url is None:
            raise usage_error("--redis-url (or WHEELQ_REDIS_URL, or [redis] url) is required")
        return url

    @contextmanager
    def client(self) -> Iterator[Client]:
        """A `Client` with the ``[client]`` settings (resolved before it connects), closed after."""
        from wheelq.producer.client import Client

        url, settings = self.redis_url(), self.section("client")
        with Client.from_url(url, **settings) as client:
            yield client

    @contextmanager
    def admin(self) -> Iterator[Admin]:
        """An `Admin` with the ``[client]`` settings (resolved before it connects), closed after."""
        from wheelq.admin.admin import Admin

        url, settings = self.redis_url(), self.section("client")
        with Admin.from_url(url, **settings) as admin:
            yield admin


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
    """Return `url` if redis-py can parse it as meant; exit 2 otherwise."""
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
