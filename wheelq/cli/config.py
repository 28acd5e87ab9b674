"""Where a command's settings come from: the TOML file and the environment.

Precedence, rising: the settings' defaults, the file (``--config`` or
``$WHEELQ_CONFIG``), the environment, flags. The file has the sections ``[redis]``,
``[client]``, ``[scheduler]``, ``[worker]``, ``[serve]`` and ``[callbacks]``; their keys are the
fields of the settings dataclasses plus a few only the CLI reads (`CLI_KEYS`), so
a field added to a dataclass is accepted here without a change. Every key also has
an environment variable ``WHEELQ_<SECTION>_<KEY>`` (`env_name`), for example
``WHEELQ_WORKER_VISIBILITY_TIMEOUT_MS`` or ``WHEELQ_REDIS_URL``. An empty variable
counts as unset. ``WHEELQ_TOPICS``, the older name of ``WHEELQ_SCHEDULER_TOPICS``, is
still read (the newer one wins). A ``WHEELQ_<SECTION>_`` variable that names no key
is refused, as an unknown key in the file is: a misspelt setting must not be
silently ignored.
"""

from __future__ import annotations

import tomllib
from collections.abc import Collection, Mapping
from typing import Any

from wheelq.cli.errors import usage_error
from wheelq.core.settings import (
    CallbackSettings,
    ClientSettings,
    Range,
    SchedulerSettings,
    ServeSettings,
    WorkerSettings,
    setting_ranges,
)

SETTINGS: dict[str, type] = {
    "client": ClientSettings,
    "scheduler": SchedulerSettings,
    "worker": WorkerSettings,
    "serve": ServeSettings,
    "callbacks": CallbackSettings,
}
CLI_KEYS: dict[str, tuple[str, ...]] = {
    "redis": ("url",),
    "scheduler": ("topics", "metrics_port", "metrics_host"),
    "worker": ("group", "start", "metrics_port", "metrics_host"),
    "serve": ("host", "tokens", "deliver", "allowed_hosts", "receipt_secret"),
    "callbacks": ("signing_secret", "allow_private", "group"),
}
CLI_RANGES: dict[str, Range] = {"metrics_port": Range(0, 65535)}
"""The ranges of the integer keys only the CLI reads (0: no metrics server)."""
SECTIONS: dict[str, tuple[str, ...]] = {
    "redis": CLI_KEYS["redis"],
    **{name: CLI_KEYS.get(name, ()) + tuple(setting_ranges(cls)) for name, cls in SETTINGS.items()},
}
"""Each section's keys: the CLI's own first, then the settings fields in their order."""
ALIASES: dict[str, tuple[str, str]] = {"WHEELQ_TOPICS": ("scheduler", "topics")}
"""Older variable names still read: name -> (section, key)."""
STARTS = ("earliest", "now")


def env_name(section: str, key: str) -> str:
    """The environment variable of `key` in `section`: ``WHEELQ_<SECTION>_<KEY>``."""
    return f"WHEELQ_{section}_{key}".upper()


def check_environment(environ: Mapping[str, str]) -> None:
    """Refuse a ``WHEELQ_<SECTION>_*`` variable that names no key of that section.

    Raises:
        CliError: (exit 2) Naming the variable and the section's variables.
    """
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
    """The keys of `section` set in `environ` (but not those in `skip`), parsed and checked.

    A setting must be an int in its field's range; ``topics`` is a comma-separated
    list; ``start`` is earliest or now; ``url`` and ``group`` are checked where used.

    Raises:
        InvalidArgumentError: (exit 2) A setting's value is not an int in its range;
            the message names the variable and the range.
        CliError: (exit 2) ``topics`` names no topic, or ``start`` is something else.
    """
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
