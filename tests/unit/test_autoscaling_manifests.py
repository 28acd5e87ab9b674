"""deploy/kubernetes/autoscaling/: the KEDA ScaledObject, the HorizontalPodAutoscaler and
prometheus-adapter's rules parse, and every metric, label and label value they read is one
a scheduler node exports (its collector, with its shard gauges holding a read): renaming
``wheelq_jobs_due``, its ``within`` label or a window breaks this test. The two ways scale
on the same targets, and the recipe page shows each file."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import wheelq
from wheelq.core.observe import GroupView, ShardObservation
from wheelq.metrics.collectors import FORECAST_MS, SchedulerCollector, ShardGauges

ROOT = Path(__file__).resolve().parents[2]
KUBE = ROOT / "deploy" / "kubernetes" / "autoscaling"
KEDA = KUBE / "keda-scaledobject.yaml"
HPA = KUBE / "hpa-external.yaml"
ADAPTER = KUBE / "prometheus-adapter-rules.yaml"
RECIPE = ROOT / "docs" / "operations" / "autoscaling.md"
SELECTOR = re.compile(r"\b(wheelq_\w+)\{([^}]*)\}")
MATCHER = re.compile(r'(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"')

Exported = dict[str, dict[str, set[str]]]
"""Metric name -> label name -> the values it was exported with."""


def exported() -> Exported:
    """What a scheduler node's collector exports once its shard gauges hold a read of one
    shard with a consumer group and every forecast window."""
    node = wheelq.Scheduler.from_url("redis://127.0.0.1:1/0", ["emails"])
    gauges = ShardGauges(node)  # not started: request() is a no-op, `latest` is as set
    gauges.latest = [
        ShardObservation(
            topic="emails",
            shard=0,
            at_ms=1_000,
            pending=5,
            due_soon=0,
            length=3,
            entries_added=3,
            dead=0,
            groups=(GroupView("default", pending=1, lag=2, entries_read=1),),
            due_within=tuple((ms, 1) for ms in FORECAST_MS),
        )
    ]
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SchedulerCollector(node, gauges))
    out: Exported = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            labels = out.setdefault(sample.name, {})
            for name, value in sample.labels.items():
                labels.setdefault(name, set()).add(value)
    return out


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text("utf-8"))


def check_selector(metric: str, labels: dict[str, str | None], found: Exported) -> None:
    """`metric` is exported, with every label named; `within` only with an exported value
    (a topic or group is the user's to name)."""
    assert metric in found, f"{metric} is not exported: {sorted(found)}"
    for name, value in labels.items():
        assert name in found[metric], f"{metric} has no label {name!r}"
        if name == "within" and value is not None:
            assert value in found[metric][name], f"{metric} within={value!r} is not exported"


def selectors(query: str) -> list[tuple[str, dict[str, str | None]]]:
    """Each ``wheelq_x{...}`` of a PromQL query with its equality matchers' label values;
    another matcher (``label!=""``) names its label with the value None."""
    out = []
    for metric, matchers in SELECTOR.findall(query):
        found = MATCHER.findall(matchers)
        assert found or not matchers.strip(), f"matchers not understood: {matchers!r}"
        out.append((metric, {name: value if op == "=" else None for name, op, value in found}))
    return out


def test_the_forecast_is_exported_for_each_window_with_its_label() -> None:
    found = exported()
    assert found["wheelq_jobs_due"]["within"] == {"10", "60", "300"}
    assert found["wheelq_jobs_due"]["topic"] == {"emails"}
    assert "group" in found["wheelq_ready_entries"]


def test_the_keda_scaled_object_reads_what_the_nodes_export() -> None:
    doc = load(KEDA)
    assert (doc["apiVersion"], doc["kind"]) == ("keda.sh/v1alpha1", "ScaledObject")
    triggers = doc["spec"]["triggers"]
    assert {t["type"] for t in triggers} == {"prometheus"}
    found = exported()
    read = []
    for trigger in triggers:
        meta = trigger["metadata"]
        assert float(meta["threshold"]) > 0 and meta["serverAddress"].startswith("http")
        for metric, labels in selectors(meta["query"]):
            check_selector(metric, labels, found)
            read.append((metric, labels))
    assert ("wheelq_jobs_due", {"topic": "emails", "within": "60"}) in read
    assert ("wheelq_ready_entries", {"topic": "emails", "group": "default"}) in read


def test_the_hpa_reads_what_the_adapter_serves_of_what_the_nodes_export() -> None:
    hpa, rules = load(HPA), load(ADAPTER)
    assert (hpa["apiVersion"], hpa["kind"]) == ("autoscaling/v2", "HorizontalPodAutoscaler")
    found = exported()
    served: dict[str, str] = {}
    for rule in rules["externalRules"]:
        ((metric, labels),) = selectors(rule["seriesQuery"])
        check_selector(metric, labels, found)
        grouped = re.search(r"by \(([^)]*)\)", rule["metricsQuery"])
        assert grouped is not None, rule
        for label in (g.strip() for g in grouped[1].split(",")):
            assert label in found[metric], f"{metric} has no label {label!r}"
        served[metric] = rule["metricsQuery"]
    for entry in hpa["spec"]["metrics"]:
        assert entry["type"] == "External"
        metric = entry["external"]["metric"]
        assert metric["name"] in served, f"no adapter rule serves {metric['name']}"
        check_selector(metric["name"], metric["selector"]["matchLabels"], found)


def _targets_keda() -> dict[str, float]:
    out = {}
    for trigger in load(KEDA)["spec"]["triggers"]:
        ((metric, _),) = selectors(trigger["metadata"]["query"])
        out[metric] = float(trigger["metadata"]["threshold"])
    return out


def _targets_hpa() -> dict[str, float]:
    return {
        m["external"]["metric"]["name"]: float(m["external"]["target"]["averageValue"])
        for m in load(HPA)["spec"]["metrics"]
    }


def test_keda_and_the_hpa_scale_the_same_deployment_on_the_same_targets() -> None:
    assert _targets_keda() == _targets_hpa()
    keda, hpa = load(KEDA)["spec"], load(HPA)["spec"]
    assert keda["scaleTargetRef"]["name"] == hpa["scaleTargetRef"]["name"]
    assert keda["maxReplicaCount"] == hpa["maxReplicas"]


@pytest.mark.parametrize("path", [KEDA, HPA, ADAPTER], ids=lambda p: p.name)
def test_the_recipe_shows_each_manifest(path: Path) -> None:
    assert f'--8<-- "{path.relative_to(ROOT)}"' in RECIPE.read_text("utf-8")
