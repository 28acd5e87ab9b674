"""The configuration reference page (docs/reference/configuration.md), from the settings
classes and the CLI's sections."""

from __future__ import annotations

import argparse
import ast
import dataclasses
from collections.abc import Mapping
from pathlib import Path

from docs.scripts.cli_reference import walk
from docs.scripts.markdown_text import SCRIPT, code, header, prose, sentence, table
from wheelq.cli import build_parser
from wheelq.cli.context import (
    ALIASES,
    CLI_KEY_DOCS,
    CLI_KEYS,
    CLI_RANGES,
    ENVIRONMENT,
    SECTIONS,
    SETTINGS,
    env_name,
)
from wheelq.core.settings import Range, setting_ranges

SETTINGS_SOURCE = Path(__file__).resolve().parents[2] / "wheelq" / "core" / "settings.py"


@dataclasses.dataclass(frozen=True)
class Setting:
    """One key of one section, as the configuration page lists it."""

    section: str
    key: str
    default: str  # Markdown
    accepted: str  # Markdown
    unit: str
    description: str  # Markdown
    flag: str | None  # "wheelq worker --concurrency"

    @property
    def variable(self) -> str:
        return env_name(self.section, self.key)


SECTION_USE: dict[str, str] = {
    "redis": "every command that connects (the flag `--redis-url` is over it)",
    "client": "every command that enqueues or reads: `enqueue`, `cancel`, `reschedule`, "
    "`job`, `topics`, `groups`, `stats`, `top`, `dlq`, `schedule`, `serve`",
    "scheduler": "`wheelq scheduler`",
    "worker": "`wheelq worker`; `wheelq serve`'s pull consumers and the callback "
    "deliverers (`serve`, `deliver`) take their retries and visibility timeout from it",
    "serve": "`wheelq serve`",
    "callbacks": "`wheelq deliver`, and `wheelq serve` when it delivers callbacks",
    "relay": "`wheelq relay` and `wheelq outbox init`; `wheelq scheduler` runs a relay beside "
    "the node when `dsn` is set (docs/guides/outbox.md)",
}
SECTION_CLASS_NOTE = "The library takes these as keyword arguments of {target}."
SECTION_TARGETS: dict[str, str] = {
    "client": "`from_url` of `Client`, `AsyncClient`, `Admin` and `AsyncAdmin`",
    "scheduler": "`Scheduler.from_url`",
    "worker": "`Worker.from_url`",
    "relay": "`wheelq.outbox.Relay` (its `settings`, a `RelaySettings`)",
}


def attribute_docs(path: Path) -> dict[str, dict[str, str]]:
    """Each class of the module at `path`: its fields' attribute docstrings (the string
    right after an annotated assignment)."""
    docs: dict[str, dict[str, str]] = {}
    for node in ast.parse(path.read_text()).body:
        if not isinstance(node, ast.ClassDef):
            continue
        found = docs.setdefault(node.name, {})
        for before, after in zip(node.body, node.body[1:], strict=False):
            if (
                isinstance(before, ast.AnnAssign)
                and isinstance(before.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                found[before.target.id] = after.value.value
    return docs


def field_doc(cls: type, name: str, docs: Mapping[str, Mapping[str, str]]) -> str:
    for base in cls.__mro__:
        if name in docs.get(base.__name__, {}):
            return docs[base.__name__][name]
    raise LookupError(f"{cls.__name__}.{name} has no docstring in {SETTINGS_SOURCE.name}")


def unit_of(key: str) -> str:
    for suffix, unit in (("_ms", "ms"), ("_bytes", "bytes"), ("_pct", "%")):
        if key.endswith(suffix):
            return unit
    return ""


def human(value: int, unit: str) -> str:
    """``86400000`` ms as ``1 d``, ``1048576`` bytes as ``1 MiB``: exact, else nothing."""
    steps = {
        "ms": (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000)),
        "bytes": (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)),
    }.get(unit, ())
    for name, size in steps:
        if value >= size and value % size == 0:
            return f"{value // size} {name}"
    return ""


def number(value: int, unit: str) -> str:
    hint = human(value, unit)
    return f"{value} ({hint})" if hint else str(value)


def flags_over(parser: argparse.ArgumentParser) -> dict[tuple[str, str], str]:
    """(section, key) -> the flag over it: ``--redis-url`` for ``[redis] url``; else an
    option of the command named like the section whose destination is the key."""
    out: dict[tuple[str, str], str] = {("redis", "url"): "--redis-url"}
    for command in walk(parser):
        if len(command.words) != 1 or command.words[0] not in SECTIONS:
            continue
        section = command.words[0]
        for action in command.parser._actions:
            if action.option_strings and action.dest in SECTIONS[section]:
                out[(section, action.dest)] = f"wheelq {section} {action.option_strings[-1]}"
    return out


def settings() -> list[Setting]:
    """Every key of every section, in the order of `SECTIONS`."""
    docs = attribute_docs(SETTINGS_SOURCE)
    flags = flags_over(build_parser())
    out: list[Setting] = []
    for section, keys in SECTIONS.items():
        cls = SETTINGS.get(section)
        ranges: Mapping[str, Range] = setting_ranges(cls) if cls is not None else {}
        defaults = {f.name: f.default for f in dataclasses.fields(cls)} if cls is not None else {}
        for key in keys:
            flag = flags.get((section, key))
            if key in CLI_KEYS.get(section, ()):
                doc = CLI_KEY_DOCS[(section, key)]
                bounds = CLI_RANGES.get(key)
                accepted = f"[{bounds.low}, {bounds.high}]" if bounds else prose(doc.accepted)
                out.append(
                    Setting(
                        section,
                        key,
                        prose(doc.default),
                        accepted,
                        unit_of(key),
                        prose(doc.description),
                        flag,
                    )
                )
                continue
            assert cls is not None, (section, key)
            bounds, default, unit = ranges[key], defaults[key], unit_of(key)
            assert isinstance(default, int), (section, key, default)
            out.append(
                Setting(
                    section,
                    key,
                    number(default, unit),
                    f"[{bounds.low}, {bounds.high}]",
                    unit,
                    prose(field_doc(cls, key, docs)),
                    flag,
                )
            )
    return out


def configuration_page() -> str:
    missing = set(SECTIONS) - set(SECTION_USE)
    assert not missing, f"SECTION_USE in {SCRIPT} lacks {sorted(missing)}"
    rows = settings()
    aliases = ", ".join(
        f"{code(old)} (an older name of {code(env_name(*target))}; the newer name wins)"
        for old, target in sorted(ALIASES.items())
    )
    others = [
        (name, text)
        for name, text in ENVIRONMENT.items()
        if "<" not in name and name not in {s.variable for s in rows}
    ]
    out = [
        header("wheelq/core/settings.py and wheelq/cli/context.py"),
        "",
        "# Configuration",
        "",
        "Every setting, with its environment variable, default, accepted range and unit. "
        "Integer settings out of range are refused, naming the setting and its range.",
        "",
        "## How settings are given",
        "",
        "- **In Python**, as keyword arguments of `from_url`: "
        "`Client.from_url(url, default_shards=8)`, "
        "`Scheduler.from_url(url, lease_ttl_ms=10_000)`, "
        "`Worker.from_url(url, topic, handler, visibility_timeout_ms=60_000)`. An unknown "
        "keyword or an out-of-range value raises `wheelq.InvalidArgumentError` naming it. "
        "Library code never reads the environment: `from_url` takes only its arguments.",
        "- **For the CLI**, in a TOML file given by `--config FILE` or `WHEELQ_CONFIG`, with "
        "the sections below; `config/wheelq.toml` (at the end of this page) lists every key "
        "with its default.",
        "- **As environment variables**: every key is also `WHEELQ_<SECTION>_<KEY>` in "
        "capitals, e.g. `[worker] visibility_timeout_ms` is "
        "`WHEELQ_WORKER_VISIBILITY_TIMEOUT_MS`. An empty variable counts as unset."
        + (f" Also read: {aliases}." if aliases else ""),
        "- **As flags** of the command, for the keys the tables below name one for.",
        "",
        "## Precedence and mistakes {#precedence}",
        "",
        "For every command: **defaults < file < environment < flags**. A value a flag "
        "overrides is not read.",
        "",
        "The CLI refuses, before it starts anything, with one line and exit status 2:",
        "",
        "- a section or key of the file it does not know, naming the file, the section and "
        "the known keys;",
        "- a variable starting with the prefix of a section ("
        + ", ".join(code(f"WHEELQ_{s.upper()}_") for s in SECTIONS)
        + ") that names no key of it, so a misspelt variable is never silently ignored;",
        "- a bad value, naming the variable or key and what it accepts "
        "(`wheelq worker: WHEELQ_WORKER_CONCURRENCY must be an int in [1, 10000], got 'lots'`).",
        "",
        "Other `WHEELQ_` variables are left alone.",
        "",
        "## Sections",
        "",
        *table(
            ["Section", "Read by", "Variables"],
            [
                (
                    f"[{code(f'[{s}]')}](#{s})",
                    prose(SECTION_USE[s]),
                    code(f"WHEELQ_{s.upper()}_<KEY>"),
                )
                for s in SECTIONS
            ],
        ),
    ]
    for section in SECTIONS:
        out += [f"## `[{section}]` {{#{section}}}", "", f"Read by {prose(SECTION_USE[section])}."]
        if section in SECTION_TARGETS:
            out += ["", SECTION_CLASS_NOTE.format(target=prose(SECTION_TARGETS[section]))]
        out += [""]
        out += table(
            ["Key", "Variable", "Default", "Accepted", "Unit", "Description", "Flag over it"],
            [
                (
                    code(s.key),
                    code(s.variable),
                    s.default,
                    s.accepted,
                    s.unit or "&nbsp;",
                    s.description,
                    code(s.flag) if s.flag else "&nbsp;",
                )
                for s in rows
                if s.section == section
            ],
        )
    out += [
        "## Other environment variables {#environment}",
        "",
        "Besides `WHEELQ_<SECTION>_<KEY>`, the CLI reads:",
        "",
        *table(
            ["Variable", "Description"],
            [(code(name), prose(sentence(text))) for name, text in others],
        ),
        "## Example file",
        "",
        "`config/wheelq.toml` in the repository, every key with its default:",
        "",
        "```toml",
        '--8<-- "config/wheelq.toml"',
        "```",
    ]
    return "\n".join(out).rstrip() + "\n"
