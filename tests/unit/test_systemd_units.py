"""The example systemd units of config/systemd/ (shown in docs/operations/deploying.md).

Each unit's ExecStart parses with wheelq's own argument parser, its stop settings fit the
settings' defaults (SIGTERM, and a TimeoutStopSec longer than the graceful stop takes), and
``systemd-analyze verify`` accepts it when that tool is on PATH (the test skips that part,
saying so, otherwise).
"""

from __future__ import annotations

import configparser
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.cli import ROOT
from wheelq.cli import build_parser
from wheelq.core.settings import SchedulerSettings, WorkerSettings

UNITS = ROOT / "config" / "systemd"
EXECUTABLE = "/opt/wheelq/venv/bin/wheelq"
INSTANCE = "emails"  # the topic a wheelq-worker@ instance is named after
HANDLER = "myapp.handlers:send_email"  # what the env example sets $HANDLER to

WORKER_STOP_S = (WorkerSettings().shutdown_grace_ms + WorkerSettings().stop_timeout_ms) / 1000
EXPECTED = {  # unit -> (command, the longest a graceful stop takes by default, in s)
    "wheelq-scheduler.service": ("scheduler", SchedulerSettings().stop_timeout_ms / 1000),
    "wheelq-worker@.service": ("worker", WORKER_STOP_S),
    "wheelq-serve.service": ("serve", WORKER_STOP_S),  # its deliverer stops like a worker
}


def service(name: str) -> configparser.SectionProxy:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keys keep their case
    parser.read_string((UNITS / name).read_text())
    return parser["Service"]


def env_example() -> dict[str, str]:
    lines = (UNITS / "wheelq-worker.env").read_text().splitlines()
    pairs = (line.split("=", 1) for line in lines if line and not line.startswith("#"))
    return {key: value for key, value in pairs}


def test_the_units_are_the_ones_the_page_shows() -> None:
    assert {p.name for p in UNITS.glob("*.service")} == set(EXPECTED)
    page = (ROOT / "docs" / "operations" / "deploying.md").read_text()
    for name in [*EXPECTED, "wheelq-worker.env"]:
        assert f'--8<-- "config/systemd/{name}"' in page, name


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_exec_start_parses_with_the_wheelq_parser(name: str) -> None:
    argv = shlex.split(service(name)["ExecStart"])
    assert argv[0] == EXECUTABLE, argv
    expanded = [
        arg.replace("%i", INSTANCE).replace("${HANDLER}", env_example()["HANDLER"])
        for arg in argv[1:]
    ]
    assert not any("%" in arg or "$" in arg for arg in expanded), expanded  # all expanded
    args = build_parser().parse_args(expanded)
    command, _ = EXPECTED[name]
    assert args.command == command
    assert args.config == "/etc/wheelq/wheelq.toml"
    if command == "worker":
        assert (args.handler, args.topic) == (HANDLER, [INSTANCE])


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_stop_signal_and_timeout_fit_the_graceful_stop(name: str) -> None:
    unit = service(name)
    _, graceful_s = EXPECTED[name]
    assert unit["KillSignal"] == "SIGTERM"  # what wheelq stops gracefully on
    assert int(unit["TimeoutStopSec"]) > graceful_s, (unit["TimeoutStopSec"], graceful_s)
    assert unit["Restart"] == "on-failure"  # a clean stop (exit 0) stays stopped


def test_the_env_example_sets_only_settings_wheelq_reads() -> None:
    env = env_example()
    assert env["WHEELQ_REDIS_URL"].startswith("redis://wheelq-worker:")  # the ACL page's user
    assert env["HANDLER"] == HANDLER
    worker = WorkerSettings()
    for key in env:
        if key.startswith("WHEELQ_WORKER_"):
            assert hasattr(worker, key.removeprefix("WHEELQ_WORKER_").lower()), key


def test_systemd_analyze_verify_accepts_the_units(tmp_path: Path) -> None:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not on PATH: the units were not verified by systemd")
    # verify checks that ExecStart's program exists: point it at one that does.
    program = tmp_path / "wheelq"
    program.write_text("#!/bin/sh\nexit 0\n")
    program.chmod(0o755)
    paths = []
    for name in EXPECTED:
        text = (UNITS / name).read_text().replace(EXECUTABLE, str(program))
        path = tmp_path / name.replace("@.", f"@{INSTANCE}.")
        path.write_text(text)
        paths.append(str(path))
    done = subprocess.run(
        [tool, "verify", *paths], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == "", done.stderr  # it only warns about unknown keys etc.
