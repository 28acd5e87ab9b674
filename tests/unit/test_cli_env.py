"""The CLI's settings sources, table-driven over every setting of every section: each has its
``WHEELQ_<SECTION>_<NAME>`` variable, and defaults < file < environment < flags holds."""

from __future__ import annotations

import argparse
import ast
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from wheelq.cli.context import SECTIONS, CliError, Context
from wheelq.core.settings import (
    CallbackSettings,
    ClientSettings,
    RelaySettings,
    SchedulerSettings,
    ServeSettings,
    WorkerSettings,
    setting_ranges,
)
from wheelq.errors import InvalidArgumentError

ROOT = Path(__file__).resolve().parents[2]

# Every field of every settings class, with the variable named as the README promises it.
SETTINGS = [
    (section, f.name, f"WHEELQ_{section.upper()}_{f.name.upper()}", setting_ranges(cls)[f.name])
    for section, cls in (
        ("client", ClientSettings),
        ("scheduler", SchedulerSettings),
        ("worker", WorkerSettings),
        ("serve", ServeSettings),
        ("callbacks", CallbackSettings),
        ("relay", RelaySettings),
    )
    for f in dataclasses.fields(cls)
]
IDS = [var for _, _, var, _ in SETTINGS]
CLI_KEYS = [  # keys only the CLI reads: (section, key, variable, value, parsed)
    ("redis", "url", "WHEELQ_REDIS_URL", "redis://h:1/0", "redis://h:1/0"),
    ("scheduler", "topics", "WHEELQ_SCHEDULER_TOPICS", "a, b", ["a", "b"]),
    ("worker", "group", "WHEELQ_WORKER_GROUP", "audit", "audit"),
    ("worker", "start", "WHEELQ_WORKER_START", "now", "now"),
    ("scheduler", "metrics_port", "WHEELQ_SCHEDULER_METRICS_PORT", "9100", 9100),
    ("worker", "metrics_port", "WHEELQ_WORKER_METRICS_PORT", "9101", 9101),
    ("scheduler", "metrics_host", "WHEELQ_SCHEDULER_METRICS_HOST", "::1", "::1"),
    ("worker", "metrics_host", "WHEELQ_WORKER_METRICS_HOST", "10.0.0.5", "10.0.0.5"),
    ("serve", "host", "WHEELQ_SERVE_HOST", "0.0.0.0", "0.0.0.0"),
    ("serve", "tokens", "WHEELQ_SERVE_TOKENS", "t" * 16, "t" * 16),
    ("serve", "deliver", "WHEELQ_SERVE_DELIVER", "a,b", "a,b"),
    ("serve", "allowed_hosts", "WHEELQ_SERVE_ALLOWED_HOSTS", "a.example,b", "a.example,b"),
    ("serve", "receipt_secret", "WHEELQ_SERVE_RECEIPT_SECRET", "s3cret", "s3cret"),
    (
        "serve",
        "prometheus_url",
        "WHEELQ_SERVE_PROMETHEUS_URL",
        "http://prometheus:9090",
        "http://prometheus:9090",
    ),
    ("callbacks", "signing_secret", "WHEELQ_CALLBACKS_SIGNING_SECRET", "k", "k"),
    ("callbacks", "allow_private", "WHEELQ_CALLBACKS_ALLOW_PRIVATE", "true", "true"),
    ("callbacks", "group", "WHEELQ_CALLBACKS_GROUP", "hooks", "hooks"),
    ("relay", "dsn", "WHEELQ_RELAY_DSN", "postgresql://a@h/db", "postgresql://a@h/db"),
    ("relay", "ack", "WHEELQ_RELAY_ACK", "persisted", "persisted"),
    ("relay", "metrics_port", "WHEELQ_RELAY_METRICS_PORT", "9102", 9102),
    ("relay", "metrics_host", "WHEELQ_RELAY_METRICS_HOST", "127.0.0.1", "127.0.0.1"),
]


def _context(environ: dict[str, str], config: dict[str, dict[str, Any]] | None = None) -> Context:
    return Context(argparse.Namespace(), config or {}, environ)


def test_the_table_covers_every_key_of_every_section() -> None:
    table = {(section, key) for section, key, _, _ in SETTINGS}
    table |= {(section, key) for section, key, *_ in CLI_KEYS}
    assert table == {(section, key) for section, keys in SECTIONS.items() for key in keys}


@pytest.mark.parametrize(("section", "name", "var", "bounds"), SETTINGS, ids=IDS)
def test_each_setting_has_its_variable_over_the_file_and_under_flags(
    section: str, name: str, var: str, bounds: Any
) -> None:
    in_file, in_env, in_flag = bounds.low, bounds.high, (bounds.low + bounds.high) // 2
    file = {section: {name: in_file}}
    assert _context({}, file).section(section)[name] == in_file
    assert _context({var: str(in_env)}, file).section(section)[name] == in_env
    assert _context({var: str(in_env)}).section(section)[name] == in_env
    assert _context({var: str(in_env)}, file).section(section, **{name: in_flag})[name] == in_flag
    assert _context({var: str(in_env)}, file).section(section, **{name: None})[name] == in_env
    assert name not in _context({var: ""}).section(section)  # empty: unset


@pytest.mark.parametrize(("section", "name", "var", "bounds"), SETTINGS, ids=IDS)
@pytest.mark.parametrize(
    ("text", "shown"), [("abc", "'abc'"), ("1.5", "'1.5'"), ("below", None), ("above", None)]
)
def test_a_bad_value_names_the_variable_and_the_range(
    section: str, name: str, var: str, bounds: Any, text: str, shown: str | None
) -> None:
    if shown is None:
        value = bounds.low - 1 if text == "below" else bounds.high + 1
        text, shown = str(value), str(value)
    with pytest.raises(InvalidArgumentError) as caught:
        _context({var: text}, {section: {name: bounds.low}}).section(section)
    assert caught.value.parameter == var
    assert (
        str(caught.value) == f"{var} must be an int in [{bounds.low}, {bounds.high}], got {shown}"
    )


@pytest.mark.parametrize(("section", "name", "var", "bounds"), SETTINGS, ids=IDS)
def test_a_bad_value_a_flag_overrides_is_not_read(
    section: str, name: str, var: str, bounds: Any
) -> None:
    assert _context({var: "abc"}).section(section, **{name: bounds.low})[name] == bounds.low


@pytest.mark.parametrize(("section", "key", "var", "text", "parsed"), CLI_KEYS, ids=str)
def test_the_cli_keys_have_variables_too(
    section: str, key: str, var: str, text: str, parsed: object
) -> None:
    assert _context({var: text}, {section: {key: "from-file"}}).section(section)[key] == parsed
    assert _context({var: text}).section(section, **{key: "flag"})[key] == "flag"


def test_wheelq_topics_is_still_read_and_the_new_name_wins() -> None:
    assert _context({"WHEELQ_TOPICS": "a"}).section("scheduler")["topics"] == ["a"]
    both = {"WHEELQ_TOPICS": "a", "WHEELQ_SCHEDULER_TOPICS": "b"}
    assert _context(both).section("scheduler")["topics"] == ["b"]


@pytest.mark.parametrize(
    ("var", "text", "fragment"),
    [
        ("WHEELQ_WORKER_START", "latest", "WHEELQ_WORKER_START must be one of earliest, now"),
        ("WHEELQ_SCHEDULER_TOPICS", " , ", "WHEELQ_SCHEDULER_TOPICS names no topic"),
        ("WHEELQ_TOPICS", ",", "WHEELQ_TOPICS names no topic"),
    ],
)
def test_bad_cli_key_values_name_the_variable(var: str, text: str, fragment: str) -> None:
    section = "worker" if "WORKER" in var else "scheduler"
    with pytest.raises(CliError) as caught:
        _context({var: text}).section(section)
    assert caught.value.code == 2
    assert fragment in str(caught.value)


@pytest.mark.parametrize(
    "var",
    ["WHEELQ_WORKER_VISIBILITY_TIMEOUT", "WHEELQ_SCHEDULER_TOPIC", "WHEELQ_CLIENT_SHARDS",
     "WHEELQ_REDIS_PASSWORD", "WHEELQ_WORKER_concurrency"],
)  # fmt: skip
def test_a_misspelt_variable_is_refused_not_ignored(var: str) -> None:
    with pytest.raises(CliError) as caught:
        Context.load(argparse.Namespace(), {var: "1"})
    assert caught.value.code == 2
    message = str(caught.value)
    assert message.startswith(f"unknown environment variable {var}; [")
    assert "\n" not in message


def test_other_wheelq_variables_are_left_alone() -> None:
    environ = {"WHEELQ_LOCUST_RATE": "5", "WHEELQ_TEST_OUT": "x", "WHEELQ_LOG_LEVEL": "DEBUG"}
    assert Context.load(argparse.Namespace(), environ).environ == environ


def test_the_configuration_reference_has_each_variable_with_its_default_and_range() -> None:
    # docs/reference/configuration.md is generated (tests/unit/test_docs_reference.py checks
    # it is current); this checks what its rows promise against the settings themselves.
    reference = (ROOT / "docs" / "reference" / "configuration.md").read_text()
    classes = {
        "client": ClientSettings,
        "scheduler": SchedulerSettings,
        "worker": WorkerSettings,
        "serve": ServeSettings,
        "callbacks": CallbackSettings,
        "relay": RelaySettings,
    }
    rows = {line.split(" | ")[1]: line for line in reference.splitlines() if line.startswith("| `")}
    for section, name, var, bounds in SETTINGS:
        default = getattr(classes[section](), name)
        row = rows[f"`{var}`"]
        assert row.startswith(f"| `{name}` | `{var}` | {default}"), row
        assert f" | [{bounds.low}, {bounds.high}] | " in row, row
    for _, key, var, *_ in CLI_KEYS:
        assert rows[f"`{var}`"].startswith(f"| `{key}` | `{var}` | "), var


def test_the_example_config_names_each_sections_variables() -> None:
    config = (ROOT / "config" / "wheelq.toml").read_text()
    for section in SECTIONS:
        assert f"[{section}]\n# Env: WHEELQ_{section.upper()}_<KEY>" in config, section


def test_only_the_cli_reads_the_environment() -> None:
    readers = []
    for path in sorted((ROOT / "wheelq").rglob("*.py")):
        if path.parent.name == "cli":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", None)
            if name in {"environ", "environb", "getenv", "getenvb"}:
                readers.append(f"{path.relative_to(ROOT)}:{node.lineno}")  # type: ignore[attr-defined]
    assert readers == []
