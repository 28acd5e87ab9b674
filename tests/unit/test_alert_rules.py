"""config/prometheus-alerts.yml: promtool accepts it and its unit tests pass, every alert is
tested firing and not firing, has a runbook section, and reads only metrics (and parts) the
roles export.

promtool comes with Prometheus (Debian: ``apt-get install prometheus``); without it on PATH
the promtool tests skip and say so, or fail where ``WHEELQ_REQUIRE_PROMTOOL=1`` (CI).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry, Metric, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import wheelq
from tests.support.docs import snippets
from wheelq.metrics.collectors import Observed, collectors_for
from wheelq.outbox import Relay

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "config" / "prometheus-alerts.yml"
RULE_TESTS = ROOT / "config" / "prometheus-alerts.test.yml"
RUNBOOK = ROOT / "docs" / "operations" / "alerts.md"
METRIC = re.compile(r"\bwheelq_[a-z_]+")
PARTS = re.compile(r'part=~"([^"]+)"')
SAMPLE_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum")}


def _promtool() -> str:
    found = shutil.which("promtool")
    if found is not None:
        return found
    how = (
        "promtool is not on PATH: install it (Debian/Ubuntu: apt-get install prometheus; "
        "elsewhere the prometheus release archive from https://prometheus.io/download/ has it)"
    )
    if os.environ.get("WHEELQ_REQUIRE_PROMTOOL") == "1":
        pytest.fail(how)
    pytest.skip(how)


def _run_promtool(*args: str) -> None:
    done = subprocess.run(
        [_promtool(), *args], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, f"promtool {' '.join(args)}:\n{done.stdout}\n{done.stderr}"


def _alerts() -> list[dict[str, Any]]:
    (group,) = yaml.safe_load(RULES.read_text())["groups"]
    assert group["name"] == "wheelq"
    alerts: list[dict[str, Any]] = [rule for rule in group["rules"] if "alert" in rule]
    return alerts


def _families() -> list[Metric]:
    """The families the roles export, made (not started) with a fake URL (and DSN): a family
    with no samples yet still has its TYPE line; part health has a sample per part."""
    url = "redis://127.0.0.1:1/0"
    client = wheelq.Client.from_url(url)
    roles: list[Observed] = [
        wheelq.Scheduler.from_url(url, ["t"]),
        wheelq.Worker.from_url(url, "t", lambda job: None),
        client,
        Relay(wheelq.AsyncClient.from_url(url), "postgresql://127.0.0.1:1/none"),
    ]
    registry = CollectorRegistry(auto_describe=False)
    try:
        for collector, _ in collectors_for(roles):  # with the scheduler's shard gauges
            registry.register(collector)
        text = generate_latest(registry).decode()
    finally:
        client.close()
    return list(text_string_to_metric_families(text))


def _exported(families: list[Metric]) -> set[str]:
    """Sample names: a counter's ``_total``, a histogram's ``_bucket``, ``_count``, ``_sum``."""
    return {
        family.name + suffix
        for family in families
        for suffix in SAMPLE_SUFFIXES.get(family.type, ("",))
    }


def test_the_runbooks_promtool_commands_pass_as_written() -> None:
    """The runbook's two commands, as a reader runs them from the repository root: the
    rules pass `promtool check rules` and their unit tests pass `promtool test rules`."""
    commands = snippets("docs/operations/alerts.md", "Loading the rules").commands
    assert [c[:3] for c in commands] == [
        ["promtool", "check", "rules"],
        ["promtool", "test", "rules"],
    ]
    assert commands[0][3:] == [str(RULES.relative_to(ROOT))]
    assert commands[1][3:] == [str(RULE_TESTS.relative_to(ROOT))]
    for command in commands:
        _run_promtool(*command[1:])


def test_every_alert_is_tested_firing_and_not_firing() -> None:
    fired: set[str] = set()
    quiet: set[str] = set()
    for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for case in test.get("alert_rule_test", []):
            (fired if case.get("exp_alerts") else quiet).add(case["alertname"])
    names = {a["alert"] for a in _alerts()}
    assert names - fired == set(), "alerts no test sees fire"
    assert names - quiet == set(), "alerts no test sees stay quiet"


def test_every_alert_has_severity_annotations_and_its_runbook_anchor() -> None:
    for alert in _alerts():
        name = alert["alert"]
        assert alert["labels"]["severity"] in ("page", "ticket"), name
        notes = alert["annotations"]
        assert notes["summary"] and notes["description"], name
        assert notes["runbook_url"] == f"docs/operations/alerts.md#{name.lower()}", name


def test_every_alert_has_a_runbook_section_and_every_section_an_alert() -> None:
    sections = set(re.findall(r"^## (Wheelq\w+)\s*$", RUNBOOK.read_text(), re.MULTILINE))
    names = {a["alert"] for a in _alerts()}
    assert names - sections == set(), "alerts without a '## <AlertName>' section in the runbook"
    assert sections - names == set(), "runbook sections of alerts the rules do not have"


def test_every_metric_an_alert_reads_is_exported() -> None:
    exported = _exported(_families())
    used = {name for a in _alerts() for name in METRIC.findall(a["expr"])}
    assert len(used) >= 10, f"the regex found too few metric names: {used}"
    assert used - exported == set()


def test_the_parts_the_alerts_name_are_parts_the_roles_report() -> None:
    named = {
        part
        for a in _alerts()
        for pattern in PARTS.findall(a["expr"])
        for part in pattern.split("|")
    }
    assert named, "no alert names a part"
    reported = {
        sample.labels["part"]
        for family in _families()
        for sample in family.samples
        if sample.name == "wheelq_part_up"
    }
    assert named - reported == set()
