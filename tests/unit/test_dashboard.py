"""config/grafana-dashboard.json uses only metrics the collectors export, and each of them
where it fits (a histogram's buckets, a counter's _total)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

import wheelq
from wheelq.core.keys import ShardKeys
from wheelq.metrics import registry_for

DASHBOARD = Path(__file__).resolve().parents[2] / "config" / "grafana-dashboard.json"
NAME = re.compile(r"\bwheelq_[a-z_]+")


def _exported() -> set[str]:
    """Sample names the collectors export, from roles made (not started) with a fake URL."""
    url = "redis://127.0.0.1:1/0"
    node = wheelq.Scheduler.from_url(url, ["t"])
    worker = wheelq.Worker.from_url(url, "t", lambda job: None)
    client = wheelq.Client.from_url(url)
    node.node_metrics.record("emitted", "t", 0, 1)
    node.node_metrics.lateness("t").observe(1)
    node.node_metrics.record("acquired", "t", 0, 0)
    node.leads.add(ShardKeys("t", 0), 0)
    try:
        text = generate_latest(registry_for(node, worker, client)).decode()
    finally:
        client.close()
    names = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    # The per-shard gauges are read from Redis by a running node's ShardGauges part.
    names |= {
        "wheelq_pending_jobs",
        "wheelq_stream_entries",
        "wheelq_dead_letters",
        "wheelq_ready_entries",
        "wheelq_in_flight_entries",
        "wheelq_oldest_in_flight_age_seconds",
        "wheelq_line_jobs",
        "wheelq_line_key_jobs",
        "wheelq_line_key_behind_seconds",
    }
    return names


def _exprs() -> list[str]:
    dash = json.loads(DASHBOARD.read_text())
    out = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    out += [v.get("definition", "") for v in dash["templating"]["list"]]
    return out


def test_every_metric_the_dashboard_names_is_exported() -> None:
    exported = _exported()
    used = {name for expr in _exprs() for name in NAME.findall(expr)}
    assert used, "the dashboard names no metric"
    assert used - exported == set()


@pytest.mark.parametrize("expr", [e for e in _exprs() if "histogram_quantile" in e])
def test_quantiles_read_histogram_buckets(expr: str) -> None:
    assert all(name.endswith("_bucket") for name in NAME.findall(expr))


def test_the_dashboard_has_a_topic_variable() -> None:
    variables = json.loads(DASHBOARD.read_text())["templating"]["list"]
    assert "topic" in [v["name"] for v in variables]
    assert any('topic=~"$topic"' in e for e in _exprs())
