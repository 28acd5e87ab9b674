"""deploy/: the compose file and the Kubernetes manifests, shown on docs/operations/deploying.md.

The compose file passes the compose specification's schema (check-jsonschema's vendored
copy, offline) and the Kubernetes manifests the Kubernetes API schemas (kubernetes-validate,
offline, strict: an unknown field fails). Then what no schema knows: every wheelq command
parses with wheelq's own parser and its settings file and environment with wheelq's own
loader, the probes and scrape targets point at the ports the roles serve, stop timeouts
outlast the graceful stop, each role connects as its own Redis user from the ACL page,
the image is the one kustomize names at this version, and Prometheus and Grafana get the
shipped alert rules and dashboard. No secret is written in deploy/: each comes from the
environment (compose refuses to start without it) or from a file deploy/secrets.sh writes
(kustomize refuses to build without it). promtool checks the Prometheus configuration when
it is on PATH (required under ``WHEELQ_REQUIRE_PROMTOOL=1``, as in CI); kustomize builds
the manifests when it (or kubectl) is on PATH.
"""

from __future__ import annotations

import ast
import base64
import json
import os
import re
import shlex
import shutil
import stat
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
from tests.support import compose as composed
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
ROLES = ("scheduler", "worker", "run", "relay", "serve")
APP_IMAGE = DEPLOY / "app-image"
APP_TASKS = APP_IMAGE / "app" / "tasks.py"
SECRETS_SCRIPT = DEPLOY / "secrets.sh"
COMPOSE_SECRETS = {
    "WHEELQ_TOKEN",  # the console's and API's (write)
    "WHEELQ_METRICS_TOKEN",  # Prometheus's (read)
    "GRAFANA_PASSWORD",
    *(f"REDIS_{role.upper()}_PASSWORD" for role in ROLES),
    "POSTGRES_PASSWORD",  # the outbox's database's
}


def load_all(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text("utf-8")) if doc]


def compose() -> dict[str, Any]:
    """The compose file as YAML, its variables not interpolated."""
    return composed.raw()


def env_file(path: Path) -> dict[str, str]:
    """``NAME=value`` lines (``#`` comments), as compose and kustomize read them."""
    lines = path.read_text("utf-8").splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


def run_secrets_script(root: Path) -> subprocess.CompletedProcess[str]:
    """deploy/secrets.sh, copied into `root`/deploy (so it writes there), run once."""
    (root / "deploy").mkdir(exist_ok=True)
    script = shutil.copy(SECRETS_SCRIPT, root / "deploy" / "secrets.sh")
    return subprocess.run(
        ["sh", str(script)], capture_output=True, text=True, timeout=60, check=True
    )


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A deploy/ holding what deploy/secrets.sh writes: its .env, kubernetes/secrets/."""
    root = tmp_path_factory.mktemp("secrets")
    run_secrets_script(root)
    return root / "deploy"


@pytest.fixture(scope="module")
def secrets_env(generated: Path) -> dict[str, str]:
    return env_file(generated / ".env")


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


def _wheelq_services(environ: dict[str, str]) -> dict[str, dict[str, Any]]:
    return {name: s for name, s in composed.load(environ)["services"].items() if name in ROLES}


def test_compose_runs_each_role_from_the_image_with_commands_wheelq_parses(
    secrets_env: dict[str, str],
) -> None:
    services = _wheelq_services(secrets_env)
    assert set(services) == set(ROLES)
    for name, service in services.items():
        if name == "run":  # the application's image, on the one the others run
            assert service["image"] == "localhost/wheelq-app:compose"
            build = service["build"]
            assert (COMPOSE.parent / build["context"]).resolve() == APP_IMAGE
            assert (APP_IMAGE / build["dockerfile"]).exists()
            assert build["additional_contexts"] == {"wheelq": "service:scheduler"}
            assert build["args"] == services["scheduler"]["build"]["args"]  # the same BASE
        else:
            assert service["image"] == "localhost/wheelq:compose"
            assert service["build"]["context"] == ".."
            assert (COMPOSE.parent / service["build"]["context"] / "Dockerfile").exists()
        env = {k: str(v) for k, v in service["environment"].items()}
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
    assert parses(services["run"]["command"], {}).app == f"app.tasks:{_app_of(APP_TASKS)}"
    serve = parses(services["serve"]["command"], {})
    assert (serve.host, serve.port) == ("0.0.0.0", 8080)
    assert services["serve"]["ports"] == ["127.0.0.1:8080:8080"]
    assert serve.prometheus_url == "http://prometheus:9090"


def _redis_users(command: list[str]) -> dict[str, list[str]]:
    """The ``--user NAME RULE...`` arguments of a redis-server command line, by user (the
    users come last: a rule runs to the next ``--user`` or the end)."""
    starts = [i for i, arg in enumerate(command) if arg == "--user"]
    users: dict[str, list[str]] = {}
    for start, end in zip(starts, [*starts[1:], len(command)], strict=True):
        name, *rule = command[start + 1 : end]
        assert name not in users and not any(a.startswith("--") for a in rule), (name, rule)
        users[name] = rule
    return users


def test_compose_redis_keeps_an_append_only_file_and_evicts_nothing() -> None:
    redis = compose()["services"]["redis"]
    command = redis["command"]
    command = command[: command.index("--user")]  # the users: the test below
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


def test_compose_prometheus_scrapes_every_role_with_the_shipped_alert_rules(
    secrets_env: dict[str, str],
) -> None:
    services = composed.load(secrets_env)["services"]
    mounts = _mounts(services["prometheus"])
    config_path = mounts["/etc/prometheus/prometheus.yml"]
    assert mounts["/etc/prometheus/prometheus-alerts.yml"] == ROOT / "config" / (
        "prometheus-alerts.yml"
    )
    config = yaml.safe_load(config_path.read_text("utf-8"))
    assert config["rule_files"] == ["prometheus-alerts.yml"]  # beside prometheus.yml
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == {f"wheelq-{role}" for role in ROLES}  # the rules' job names
    for role in ROLES[:-1]:  # every role but serve: the metrics port, 9100
        (sd,) = jobs[f"wheelq-{role}"]["dns_sd_configs"]
        assert sd["names"] == [role] and sd["port"] == 9100
    (static,) = jobs["wheelq-serve"]["static_configs"]
    assert static["targets"] == ["serve:8080"]
    serve_env = services["serve"]["environment"]
    assert "serve" in serve_env["WHEELQ_SERVE_ALLOWED_HOSTS"].split(",")  # its Host header
    # The read token of the service, from the environment, as a compose secret file.
    authorization = jobs["wheelq-serve"]["authorization"]
    assert set(authorization) == {"credentials_file"}, authorization
    (secret,) = services["prometheus"]["secrets"]
    assert authorization["credentials_file"] == f"/run/secrets/{secret}"
    source = compose()["secrets"][secret]
    assert source == {"environment": "WHEELQ_METRICS_TOKEN"}
    tokens = json.loads(serve_env["WHEELQ_SERVE_TOKENS"])
    assert {"token": secrets_env["WHEELQ_METRICS_TOKEN"], "access": "read"} in tokens
    assert {"token": secrets_env["WHEELQ_TOKEN"]} in tokens  # the console's and API's


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


def test_compose_grafana_lets_no_one_in_without_the_password_from_the_environment(
    secrets_env: dict[str, str],
) -> None:
    env = composed.load(secrets_env)["services"]["grafana"]["environment"]
    assert env["GF_AUTH_ANONYMOUS_ENABLED"] == "false"
    assert not {k for k in env if k.startswith("GF_AUTH_ANONYMOUS_")} - {
        "GF_AUTH_ANONYMOUS_ENABLED"
    }
    assert env["GF_SECURITY_ADMIN_PASSWORD"] == secrets_env["GRAFANA_PASSWORD"]
    without = {k: v for k, v in secrets_env.items() if k != "GRAFANA_PASSWORD"}
    with pytest.raises(composed.MissingVariableError):  # never a default such as admin
        composed.load(without)


def _acl_rule(user: str) -> list[str]:
    """The ``ACL SETUSER`` rule of `user` on the ACL page, after its name."""
    (line,) = re.findall(rf"^ACL SETUSER {user} (.*)$", ACL_PAGE.read_text("utf-8"), re.M)
    return shlex.split(line)


def test_compose_redis_has_the_acl_pages_user_for_each_role_with_passwords_from_the_env(
    secrets_env: dict[str, str],
) -> None:
    services = compose()["services"]
    users = _redis_users(services["redis"]["command"])
    # No user but the roles': a client that names none may only PING (the health check).
    assert users.pop("default") == ["reset", "on", "nopass", "+ping"]
    assert services["redis"]["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]
    assert set(users) == {f"wheelq-{role}" for role in ROLES} == set(_kubernetes_users())
    for role in ROLES:
        user = f"wheelq-{role}"
        var = f"REDIS_{role.upper()}_PASSWORD"
        rule, page = users[user], _acl_rule(user)
        (secret,) = [i for i, word in enumerate(rule) if word.startswith(">")]
        (page_secret,) = [i for i, word in enumerate(page) if word.startswith(">")]
        assert rule[:secret] + rule[secret + 1 :] == page[:page_secret] + page[page_secret + 1 :]
        (reference,) = composed.references(rule[secret])
        assert (reference.var, reference.op) == (var, ":?"), rule[secret]
        # The role's service connects as that user with that password.
        url = urlsplit(_wheelq_services(secrets_env)[role]["environment"]["WHEELQ_REDIS_URL"])
        assert (url.username, url.password) == (user, secrets_env[var])
        assert (url.hostname, url.port, url.path) == ("redis", 6379, "/0")


def test_compose_refuses_to_start_without_each_secret(secrets_env: dict[str, str]) -> None:
    required = {r.var for text in composed.strings(compose()) for r in composed.references(text)
                if r.op == ":?"}  # fmt: skip
    assert required == COMPOSE_SECRETS == set(secrets_env)  # what deploy/secrets.sh writes
    composed.load(secrets_env)  # all there: it starts
    for var in sorted(COMPOSE_SECRETS):
        for environ in (
            {k: v for k, v in secrets_env.items() if k != var},
            {**secrets_env, var: ""},
        ):
            with pytest.raises(composed.MissingVariableError) as refused:
                composed.load(environ)
            assert refused.value.var == var and "deploy/secrets.sh" in str(refused.value)


# --- no secret in deploy/ ------------------------------------------------------------------

SECRET_NAME = re.compile(r"token|password|passwd|secret|credential", re.IGNORECASE)
REFERENCE = re.compile(r"\$\{[^}]*\}|\$\([^)]*\)")  # compose's ${VAR...}, Kubernetes' $(VAR)
JSON_TOKEN = re.compile(r'"token"\s*:\s*"([^"]*)"')
URL_PASSWORD = re.compile(r"\b[a-z][a-z0-9+.-]*://[^/\s:@]*:([^@\s]+)@")


def _only_references(value: str) -> bool:
    return bool(value) and not REFERENCE.sub("", value)


def secret_literals(text: str, key: str = "") -> list[str]:
    """What in one string value (at mapping key `key`) looks like a secret written out."""
    found = []
    if SECRET_NAME.search(key) and not key.endswith("_file") and not REFERENCE.search(text):
        found.append(f"{key}: {text}")
    for ref in REFERENCE.findall(text):
        (var,) = [r.var for r in composed.references(ref)] or [ref]
        if SECRET_NAME.search(var) and ref.startswith("${") and ":?" not in ref:
            found.append(f"{ref}: a secret with a default, or none required")
    for pattern in (JSON_TOKEN, URL_PASSWORD):
        found += [f"{m[0]}" for m in pattern.finditer(text) if not _only_references(m[1])]
    if text.startswith(">") and not _only_references(text[1:]):  # a Redis ACL password
        found.append(text)
    return found


def yaml_secret_literals(node: Any, key: str = "") -> list[str]:
    if isinstance(node, str):
        return secret_literals(node, key)
    if isinstance(node, list):
        return [found for item in node for found in yaml_secret_literals(item)]  # names
    if isinstance(node, dict):
        if isinstance(node.get("name"), str) and "value" in node:  # a Kubernetes env var
            return yaml_secret_literals(node["value"], node["name"])
        return [f for k, v in node.items() for f in yaml_secret_literals(v, str(k))]
    return []


def deploy_files() -> list[Path]:
    ignored = subprocess.run(
        ["git", "-C", str(ROOT), "check-ignore", "--stdin"],
        input="\n".join(str(p) for p in DEPLOY.rglob("*")),
        capture_output=True, text=True, check=False,
    ).stdout.split()  # fmt: skip
    return sorted(p for p in DEPLOY.rglob("*") if p.is_file() and str(p) not in ignored)


@pytest.mark.parametrize(
    "planted",
    [
        'credentials: prometheus-read-token',
        'WHEELQ_SERVE_TOKENS: \'[{"token": "${WHEELQ_TOKEN:?x}"}, {"token": "fixed"}]\'',
        "GF_SECURITY_ADMIN_PASSWORD: ${GRAFANA_PASSWORD:-admin}",
        "GF_SECURITY_ADMIN_PASSWORD: ${GRAFANA_PASSWORD}",
        "url: redis://wheelq-worker:worker-secret@redis:6379/0",
        "stringData: {tokens: '[{\"token\": \"change-me\"}]'}",
        "command: [redis-server, --user, u, on, '>pass', +ping]",
        "env: [{name: REDIS_PASSWORD, value: hunter2}]",
    ],
)  # fmt: skip
def test_the_secret_check_catches_a_secret_written_out(planted: str) -> None:
    assert yaml_secret_literals(yaml.safe_load(planted)), planted


def test_no_deploy_file_holds_a_secret() -> None:
    files = deploy_files()
    assert COMPOSE in files and SECRETS_SCRIPT in files and len(files) > 10
    for path in files:
        text = path.read_text("utf-8")
        if path.suffix in (".yaml", ".yml"):
            found = [f for doc in yaml.safe_load_all(text) for f in yaml_secret_literals(doc)]
        else:
            found = [f for line in text.splitlines() for f in secret_literals(line)]
        assert found == [], (path.relative_to(ROOT), found)


def test_the_secrets_script_writes_new_random_secrets_once(tmp_path: Path) -> None:
    done = run_secrets_script(tmp_path)
    deploy = tmp_path / "deploy"
    files = {
        ".env": COMPOSE_SECRETS,
        "kubernetes/secrets/redis.env": set(ROLES),
        "kubernetes/secrets/serve.env": {"tokens"},
        "kubernetes/secrets/postgres.env": {"relay"},
    }
    values = []
    for name, keys in files.items():
        path = deploy / name
        assert f"wrote {path}" in done.stderr
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, name  # its owner's only
        found = env_file(path)
        assert set(found) == keys, name
        values += [v for k, v in found.items() if k != "tokens"]
        values += [t["token"] for t in json.loads(found.get("tokens", "[]"))]
    assert stat.S_IMODE((deploy / "kubernetes" / "secrets").stat().st_mode) == 0o700
    assert len(values) == len(set(values)) == len(COMPOSE_SECRETS) + len(ROLES) + 3
    assert all(re.fullmatch(r"[0-9a-f]{64}", v) for v in values), values  # 256 bits, no quoting
    tokens = json.loads(env_file(deploy / "kubernetes/secrets/serve.env")["tokens"])
    assert [t.get("access", "write") for t in tokens] == ["write", "read"]
    before = {name: (deploy / name).read_text() for name in files}
    again = run_secrets_script(tmp_path)  # a second run keeps the secrets in use
    assert {name: (deploy / name).read_text() for name in files} == before
    assert again.stderr.count("kept ") == len(files)
    ignored = subprocess.run(
        ["git", "-C", str(ROOT), "check-ignore", *(str(DEPLOY / name) for name in files)],
        capture_output=True, text=True, check=False,
    ).stdout.split()  # fmt: skip
    assert len(ignored) == len(files)  # never committed


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
    config = tmp_path / "prometheus.yml"
    token = tmp_path / "wheelq-metrics-token"  # the compose secret, where promtool sees it
    token.write_text("a-token\n")
    config.write_text(config.read_text().replace("/run/secrets/wheelq-metrics-token", str(token)))
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
        env = {
            e["name"]: "postgresql://u:p@db:5432/app"
            if "DSN" in e["name"]
            else "redis://u:p@redis:6379/0"
            for e in container.get("env", [])
        }
        args = parses(argv, env)
        role = args.command
        seen.add(role)
        assert deployment["metadata"]["labels"]["app.kubernetes.io/component"] == role
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        section = "worker" if role == "run" else role  # `wheelq run`'s worker serves them
        served = settings["serve"]["port"] if role == "serve" else settings[section]["metrics_port"]
        for probe, path_ in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
            get = container[probe]["httpGet"]
            assert get["path"] == path_
            assert ports[get["port"]] == served, (role, probe)  # the port the role serves
        if role == "run":
            assert args.app == f"app.tasks:{_app_of(APP_TASKS)}"  # deploy/app-image's
        if role == "worker":
            load_handler(args.handler)
        if role in ("worker", "run"):
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
    images = {image["name"]: image for image in kustomization()["images"]}
    assert set(images) == {"wheelq", "myapp"}
    assert images["wheelq"]["newTag"] == wheelq.__version__
    named = {d["metadata"]["name"]: c["image"] for d, c in _containers()}
    assert named.pop("wheelq-run") == "myapp"  # the application's image (deploy/app-image)
    assert set(named.values()) == {"wheelq"}


def _acl_users() -> set[str]:
    return set(re.findall(r"ACL SETUSER (wheelq-[\w-]+) ", ACL_PAGE.read_text("utf-8")))


def _kubernetes_users() -> dict[str, str]:
    """Each Deployment's Redis user (of its WHEELQ_REDIS_URL), by user."""
    users = {}
    for deployment, container in _containers():
        (url,) = [e["value"] for e in container["env"] if e["name"] == "WHEELQ_REDIS_URL"]
        users[urlsplit(url).username or ""] = deployment["metadata"]["name"]
    return users


def _generators() -> dict[str, dict[str, Any]]:
    return {g["name"]: g for g in kustomization()["secretGenerator"]}


def test_each_role_connects_as_its_own_acl_user_from_the_acl_page() -> None:
    generators = _generators()
    assert set(generators) == {"wheelq-redis", "wheelq-serve", "wheelq-postgres"}
    assert generators["wheelq-redis"]["envs"] == ["secrets/redis.env"]  # deploy/secrets.sh's
    for deployment, container in _containers():
        role = deployment["metadata"]["labels"]["app.kubernetes.io/component"]
        env = {e["name"]: e for e in container["env"]}
        ref = env["REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"]
        assert (ref["name"], ref["key"]) == ("wheelq-redis", role)
        names = list(env)
        assert names.index("REDIS_PASSWORD") < names.index("WHEELQ_REDIS_URL")  # $(...) sees it
        url = urlsplit(env["WHEELQ_REDIS_URL"]["value"])
        assert url.password == "$(REDIS_PASSWORD)", url
        assert url.username == f"wheelq-{role}" and url.username in _acl_users(), role
        if role == "serve":
            ref = env["WHEELQ_SERVE_TOKENS"]["valueFrom"]["secretKeyRef"]
            assert (ref["name"], ref["key"]) == ("wheelq-serve", "tokens")
            assert generators["wheelq-serve"]["envs"] == ["secrets/serve.env"]
        if role == "relay":
            ref = env["POSTGRES_PASSWORD"]["valueFrom"]["secretKeyRef"]
            assert (ref["name"], ref["key"]) == ("wheelq-postgres", "relay")
            assert generators["wheelq-postgres"]["envs"] == ["secrets/postgres.env"]
            assert names.index("POSTGRES_PASSWORD") < names.index("WHEELQ_RELAY_DSN")
            dsn = urlsplit(env["WHEELQ_RELAY_DSN"]["value"])
            assert (dsn.scheme, dsn.password) == ("postgresql", "$(POSTGRES_PASSWORD)"), dsn
    assert set(_kubernetes_users()) == {f"wheelq-{role}" for role in ROLES}


def _kustomize() -> list[str]:
    if found := shutil.which("kustomize"):
        return [found, "build"]
    if found := shutil.which("kubectl"):
        return [found, "kustomize"]
    pytest.skip("neither kustomize nor kubectl is on PATH: the kustomization is not built")


def test_kustomize_builds_only_with_the_secrets_the_script_wrote(tmp_path: Path) -> None:
    kustomize = _kustomize()
    shutil.copytree(KUBE, tmp_path / "deploy" / "kubernetes", ignore=shutil.ignore_patterns(
        "secrets"))  # fmt: skip
    built = [*kustomize, str(tmp_path / "deploy" / "kubernetes")]
    refused = subprocess.run(built, capture_output=True, text=True, timeout=60, check=False)
    assert refused.returncode != 0 and "secrets/redis.env" in refused.stderr, refused.stderr
    run_secrets_script(tmp_path)
    done = subprocess.run(built, capture_output=True, text=True, timeout=60, check=True)
    docs = [d for d in yaml.safe_load_all(done.stdout) if d]
    secrets = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Secret"}
    written = tmp_path / "deploy" / "kubernetes" / "secrets"
    for generator, file in (
        ("wheelq-redis", "redis.env"), ("wheelq-serve", "serve.env"),
        ("wheelq-postgres", "postgres.env"),
    ):  # fmt: skip
        (name,) = [n for n in secrets if n.startswith(f"{generator}-")]  # with its hash
        data = {k: base64.b64decode(v).decode() for k, v in secrets[name]["data"].items()}
        assert data == env_file(written / file), generator
    refs = [
        e["valueFrom"]["secretKeyRef"]["name"]
        for d in docs if d["kind"] == "Deployment"
        for c in d["spec"]["template"]["spec"]["containers"] for e in c["env"]
        if "valueFrom" in e
    ]  # fmt: skip
    assert refs and set(refs) == set(secrets)  # the Deployments follow the hashed names


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
     "deploy/kubernetes/worker.yaml", "deploy/app-image/Containerfile"],
)  # fmt: skip
def test_the_page_shows_the_files(shown: str) -> None:
    assert f'--8<-- "{shown}"' in PAGE.read_text("utf-8")


def _app_of(module: Path) -> str:
    """The name `module` binds a ``wheelq.App.from_url(...)`` to (read, not imported: the
    application's own dependencies are its image's, not this environment's)."""
    tree = ast.parse(module.read_text("utf-8"))
    (name,) = [
        target.id
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Call)
        and ast.unparse(node.value.func) == "wheelq.App.from_url"
        for target in node.targets
        if isinstance(target, ast.Name)
    ]
    return name


def test_compose_relays_the_outbox_of_its_database_once_the_tables_exist(
    secrets_env: dict[str, str],
) -> None:
    services = composed.load(secrets_env)["services"]
    relay, init, postgres = services["relay"], services["outbox-init"], services["postgres"]
    assert relay["depends_on"]["outbox-init"] == {"condition": "service_completed_successfully"}
    assert relay["depends_on"]["redis"] == {"condition": "service_healthy"}
    assert init["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    assert init["restart"] == "on-failure"  # once: never restarted after it succeeded
    args = parses(init["command"], {k: str(v) for k, v in init["environment"].items()})
    assert (args.command, args.action) == ("outbox", "init")
    db = postgres["environment"]
    for env in (init["environment"], relay["environment"]):
        dsn = urlsplit(env["WHEELQ_RELAY_DSN"])
        assert (dsn.scheme, dsn.hostname, dsn.port) == ("postgresql", "postgres", 5432)
        assert (dsn.username, dsn.password, dsn.path) == (
            db["POSTGRES_USER"],
            secrets_env["POSTGRES_PASSWORD"],
            f"/{db['POSTGRES_DB']}",
        )
    assert db["POSTGRES_PASSWORD"] == secrets_env["POSTGRES_PASSWORD"]
    assert any(v.endswith(":/var/lib/postgresql/data") for v in postgres["volumes"])
    assert "ports" not in postgres  # reached by the services only
