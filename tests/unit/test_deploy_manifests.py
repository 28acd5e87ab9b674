"""deploy/: the compose file and the Kubernetes manifests, shown on docs/operations/deploying.md.

The compose file passes the compose specification's schema (check-jsonschema's vendored
copy, offline) and the Kubernetes manifests the Kubernetes API schemas (kubernetes-validate,
offline, strict: an unknown field fails). Then what no schema knows: every wheelq command
parses with wheelq's own parser and its settings file and environment with wheelq's own
loader, the probes and scrape targets point at the ports the roles serve, stop timeouts
outlast the graceful stop, each role connects as its own Redis user from the ACL page,
the image is the one kustomize names at this version, and Prometheus and Grafana get the
shipped alert rules and dashboard. promtool checks the Prometheus configuration when it is
on PATH (required under ``WHEELQ_REQUIRE_PROMTOOL=1``, as in CI).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml

import wheelq
from tests.support.cli import ROOT
from wheelq.cli import build_parser
from wheelq.cli.context import Context
from wheelq.cli.services import load_handler
from wheelq.core.settings import SchedulerSettings, WorkerSettings

DEPLOY = ROOT / "deploy"
COMPOSE = DEPLOY / "compose.yaml"
KUBE = DEPLOY / "kubernetes"
PAGE = ROOT / "docs" / "operations" / "deploying.md"
ACL_PAGE = ROOT / "docs" / "operations" / "acl.md"
K8S_VERSIONS = ("1.29", kubernetes_validate.latest_version())  # oldest we claim, newest known
CONFIG_PATH = "/etc/wheelq/wheelq.toml"
WORKER_STOP_S = (WorkerSettings().shutdown_grace_ms + WorkerSettings().stop_timeout_ms) / 1000
SCHEDULER_STOP_S = SchedulerSettings().stop_timeout_ms / 1000
ROLES = ("scheduler", "worker", "serve")


def load_all(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text("utf-8")) if doc]


def compose() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(COMPOSE.read_text("utf-8"))
    return doc


def parses(argv: list[str], environ: dict[str, str]) -> Any:
    """`argv` as wheelq's parser reads it, with its settings file and environment as wheelq's
    loader reads them (an unknown key or variable fails); returns the parsed args."""
    args = build_parser().parse_args(argv)
    Context.load(args, environ=environ)
    return args


def seconds(text: str) -> float:
    match = re.fullmatch(r"(\d+)s", text)
    assert match, text
    return float(match[1])


# --- compose -------------------------------------------------------------------------------


def test_the_compose_file_passes_the_compose_specification() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec",
         str(COMPOSE)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_compose_schema_check_catches_a_mistake(tmp_path: Path) -> None:
    doc = compose()
    doc["services"]["scheduler"]["stop_grace_periood"] = "30s"  # a typo
    bad = tmp_path / "compose.yaml"
    bad.write_text(yaml.safe_dump(doc))
    done = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec",
         str(bad)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode != 0 and "stop_grace_periood" in done.stdout + done.stderr


def _wheelq_services() -> dict[str, dict[str, Any]]:
    return {name: s for name, s in compose()["services"].items() if name in ROLES}


def test_compose_runs_each_role_from_the_image_with_commands_wheelq_parses() -> None:
    services = _wheelq_services()
    assert set(services) == set(ROLES)
    for name, service in services.items():
        assert service["image"] == "localhost/wheelq:compose"
        assert service["build"]["context"] == ".."
        assert (COMPOSE.parent / service["build"]["context"] / "Dockerfile").exists()
        env = {k: str(v) for k, v in service["environment"].items()}
        env["WHEELQ_SERVE_TOKENS"] = re.sub(r"\$\{WHEELQ_TOKEN:\?[^}]*\}", "t", env.get(
            "WHEELQ_SERVE_TOKENS", "t"))  # fmt: skip
        args = parses(service["command"], env)
        assert args.command == name
        assert urlsplit(env["WHEELQ_REDIS_URL"]).hostname == "redis"
        assert seconds(service["stop_grace_period"]) > WORKER_STOP_S  # the longest stop
        assert service["read_only"] is True and service["cap_drop"] == ["ALL"]
        assert service["tmpfs"] == ["/tmp"]  # what tests/integration/test_container.py has
        if name != "serve":
            assert args.metrics_port == 9100  # what Prometheus scrapes and the image checks
            assert service["deploy"]["replicas"] >= 2
    worker = parses(services["worker"]["command"], {})
    load_handler(worker.handler)  # it is in the installed package: the image has it
    serve = parses(services["serve"]["command"], {})
    assert (serve.host, serve.port) == ("0.0.0.0", 8080)
    assert services["serve"]["ports"] == ["127.0.0.1:8080:8080"]
    assert serve.prometheus_url == "http://prometheus:9090"


def test_compose_redis_keeps_an_append_only_file_and_evicts_nothing() -> None:
    redis = compose()["services"]["redis"]
    command = redis["command"]
    flags = dict(zip(command[1::2], command[2::2], strict=True))
    assert flags["--appendonly"] == "yes"
    assert flags["--maxmemory-policy"] == "noeviction"
    assert any(v.endswith(":/data") for v in redis["volumes"])
    assert "ports" not in redis  # reached by the services only


def _mounts(service: dict[str, Any]) -> dict[str, Path]:
    """Container path -> host file of a service's bind mounts (relative to deploy/)."""
    out = {}
    for volume in service["volumes"]:
        source, target, *_ = volume.split(":")
        if source.startswith("."):
            out[target] = (COMPOSE.parent / source).resolve()
    return out


def test_compose_prometheus_scrapes_every_role_with_the_shipped_alert_rules() -> None:
    services = compose()["services"]
    mounts = _mounts(services["prometheus"])
    config_path = mounts["/etc/prometheus/prometheus.yml"]
    assert mounts["/etc/prometheus/prometheus-alerts.yml"] == ROOT / "config" / (
        "prometheus-alerts.yml"
    )
    config = yaml.safe_load(config_path.read_text("utf-8"))
    assert config["rule_files"] == ["prometheus-alerts.yml"]  # beside prometheus.yml
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == {f"wheelq-{role}" for role in ROLES}  # the rules' job names
    for role in ("scheduler", "worker"):
        (sd,) = jobs[f"wheelq-{role}"]["dns_sd_configs"]
        assert sd["names"] == [role] and sd["port"] == 9100
    (static,) = jobs["wheelq-serve"]["static_configs"]
    assert static["targets"] == ["serve:8080"]
    serve_env = services["serve"]["environment"]
    assert "serve" in serve_env["WHEELQ_SERVE_ALLOWED_HOSTS"].split(",")  # its Host header
    token = jobs["wheelq-serve"]["authorization"]["credentials"]
    assert f'{{"token": "{token}", "access": "read"}}' in serve_env["WHEELQ_SERVE_TOKENS"]


def test_compose_grafana_gets_the_dashboard_and_the_prometheus_data_source() -> None:
    grafana = compose()["services"]["grafana"]
    mounts = _mounts(grafana)
    assert mounts["/var/lib/grafana/dashboards/wheelq.json"] == ROOT / "config" / (
        "grafana-dashboard.json"
    )
    provisioning = mounts["/etc/grafana/provisioning"]
    (provider,) = yaml.safe_load((provisioning / "dashboards" / "wheelq.yaml").read_text())[
        "providers"
    ]
    assert provider["options"]["path"] == "/var/lib/grafana/dashboards"
    (source,) = yaml.safe_load((provisioning / "datasources" / "prometheus.yaml").read_text())[
        "datasources"
    ]
    assert (source["type"], source["url"]) == ("prometheus", "http://prometheus:9090")
    assert source["isDefault"] is True  # the dashboard's $datasource picks the default


def _promtool() -> str:
    found = shutil.which("promtool")
    if found:
        return found
    message = "promtool is not on PATH: the compose file's Prometheus configuration is unchecked"
    if os.environ.get("WHEELQ_REQUIRE_PROMTOOL") == "1":
        pytest.fail(message)
    pytest.skip(message)


def test_promtool_accepts_the_compose_prometheus_configuration(tmp_path: Path) -> None:
    promtool = _promtool()
    for target, source in _mounts(compose()["services"]["prometheus"]).items():
        shutil.copy(source, tmp_path / Path(target).name)  # as mounted: side by side
    done = subprocess.run(
        [promtool, "check", "config", str(tmp_path / "prometheus.yml")],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


# --- Kubernetes ----------------------------------------------------------------------------


def kustomization() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((KUBE / "kustomization.yaml").read_text("utf-8"))
    return doc


def resources() -> Iterator[tuple[Path, dict[str, Any]]]:
    for name in kustomization()["resources"]:
        for doc in load_all(KUBE / name):
            yield KUBE / name, doc


def of_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for _, doc in resources() if doc["kind"] == kind}


def test_kustomize_lists_every_manifest_beside_it() -> None:
    listed = set(kustomization()["resources"])
    present = {p.name for p in KUBE.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == present


MANIFESTS = sorted(
    [p for p in KUBE.glob("*.yaml") if p.name != "kustomization.yaml"]
    + [KUBE / "autoscaling" / "hpa-external.yaml"]
)


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: str(p.relative_to(KUBE)))
def test_the_manifest_passes_the_kubernetes_schemas(path: Path, version: str) -> None:
    for doc in load_all(path):
        kubernetes_validate.validate(doc, version, strict=True)


def test_the_kubernetes_schema_check_catches_a_mistake() -> None:
    deployment = of_kind("Deployment")["wheelq-scheduler"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["livenessprobe"] = container.pop("livenessProbe")  # a typo
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, K8S_VERSIONS[-1], strict=True)


def settings_file(tmp_path: Path) -> Path:
    """The ConfigMap's wheelq.toml, written out as the pods see it."""
    (config,) = of_kind("ConfigMap").values()
    path = tmp_path / "wheelq.toml"
    path.write_text(config["data"]["wheelq.toml"])
    return path


def _containers() -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for deployment in of_kind("Deployment").values():
        for container in deployment["spec"]["template"]["spec"]["containers"]:
            yield deployment, container


def test_each_deployment_runs_its_role_with_args_and_config_wheelq_parses(
    tmp_path: Path,
) -> None:
    path = settings_file(tmp_path)
    settings = tomllib.loads(path.read_text())
    seen = set()
    for deployment, container in _containers():
        argv = [path.as_posix() if a == CONFIG_PATH else a for a in container["args"]]
        assert CONFIG_PATH in container["args"]
        env = {e["name"]: "redis://u:p@redis:6379/0" for e in container.get("env", [])}
        args = parses(argv, env)
        role = args.command
        seen.add(role)
        assert deployment["metadata"]["labels"]["app.kubernetes.io/component"] == role
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        served = settings["serve"]["port"] if role == "serve" else settings[role]["metrics_port"]
        for probe, path_ in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
            get = container[probe]["httpGet"]
            assert get["path"] == path_
            assert ports[get["port"]] == served, (role, probe)  # the port the role serves
        if role == "worker":
            load_handler(args.handler)
            grace_s = (settings["worker"]["shutdown_grace_ms"] + settings["worker"][
                "stop_timeout_ms"]) / 1000  # fmt: skip
        elif role == "serve":
            assert settings["serve"]["host"] == "0.0.0.0"
            grace_s = WORKER_STOP_S  # its deliverer stops like a worker
        else:
            grace_s = SCHEDULER_STOP_S
        pod = deployment["spec"]["template"]["spec"]
        assert pod["terminationGracePeriodSeconds"] > grace_s, role
    assert seen == set(ROLES)
    assert of_kind("Deployment")["wheelq-scheduler"]["spec"]["replicas"] == 2


def test_every_pod_runs_as_non_root_read_only_without_capabilities_within_limits() -> None:
    for deployment, container in _containers():
        pod = deployment["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] == 10001  # the image's user
        security = container["securityContext"]
        assert security["readOnlyRootFilesystem"] is True
        assert security["allowPrivilegeEscalation"] is False
        assert security["capabilities"]["drop"] == ["ALL"]
        assert {"cpu", "memory"} <= set(container["resources"]["requests"])
        assert "memory" in container["resources"]["limits"]


def test_the_image_is_the_one_kustomize_names_at_this_version() -> None:
    (image,) = kustomization()["images"]
    assert image["name"] == "wheelq"
    assert image["newTag"] == wheelq.__version__
    assert {c["image"] for _, c in _containers()} == {"wheelq"}


def _acl_users() -> set[str]:
    return set(re.findall(r"ACL SETUSER (wheelq-[\w-]+) ", ACL_PAGE.read_text("utf-8")))


def test_each_role_connects_as_its_own_acl_user_from_the_acl_page() -> None:
    (redis_secret,) = [s for s in of_kind("Secret").values() if "scheduler" in s["stringData"]]
    for deployment, container in _containers():
        role = deployment["metadata"]["labels"]["app.kubernetes.io/component"]
        (url_ref,) = [e for e in container["env"] if e["name"] == "WHEELQ_REDIS_URL"]
        ref = url_ref["valueFrom"]["secretKeyRef"]
        assert (ref["name"], ref["key"]) == (redis_secret["metadata"]["name"], role)
        user = urlsplit(redis_secret["stringData"][role]).username
        assert user == f"wheelq-{role}" and user in _acl_users(), (role, user)


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def test_budgets_and_services_select_the_pods_and_ports_they_name() -> None:
    pods = [d["spec"]["template"] for d in of_kind("Deployment").values()]
    for name, budget in of_kind("PodDisruptionBudget").items():
        selector = budget["spec"]["selector"]["matchLabels"]
        chosen = [p for p in pods if _selects(selector, p["metadata"]["labels"])]
        assert len(chosen) == 1, name
    for name, service in of_kind("Service").items():
        chosen = [p for p in pods if _selects(service["spec"]["selector"], p["metadata"]["labels"])]
        assert chosen, name
        for port in service["spec"]["ports"]:
            named = {
                p["name"] for pod in chosen for c in pod["spec"]["containers"] for p in c["ports"]
            }
            assert port["targetPort"] in named, (name, port)
    serve = of_kind("Service")["wheelq-serve"]
    (http,) = serve["spec"]["ports"]
    assert http["port"] == 8080


def test_the_service_is_called_by_names_it_allows(tmp_path: Path) -> None:
    allowed = tomllib.loads(settings_file(tmp_path).read_text())["serve"]["allowed_hosts"]
    namespace = kustomization()["namespace"]
    name = "wheelq-serve"
    for host in (name, f"{name}.{namespace}", f"{name}.{namespace}.svc"):
        assert host in allowed


def test_autoscaling_scales_the_worker_deployment() -> None:
    workers = of_kind("Deployment")
    for path in ("keda-scaledobject.yaml", "hpa-external.yaml"):
        (doc,) = load_all(KUBE / "autoscaling" / path)
        assert doc["spec"]["scaleTargetRef"]["name"] in workers, path


@pytest.mark.parametrize(
    "shown",
    ["deploy/compose.yaml", "deploy/kubernetes/kustomization.yaml",
     "deploy/kubernetes/worker.yaml"],
)  # fmt: skip
def test_the_page_shows_the_files(shown: str) -> None:
    assert f'--8<-- "{shown}"' in PAGE.read_text("utf-8")
