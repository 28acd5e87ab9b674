"""``wheelq run MODULE:APP`` and ``manage.py wheelq run``: one flag list that both parse and
pass on whole (`wheelq.cli.run.add_flags`), and one ``module:attribute`` loader
(`wheelq.tasks.loading`) whose every refusal is the same line through both faces."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

import wheelq
from wheelq.cli import build_parser
from wheelq.cli import run as cli_run
from wheelq.cli.context import CliError, Context
from wheelq.contrib.django import conf, database
from wheelq.contrib.django.management.commands import wheelq as command
from wheelq.errors import InvalidSpecError
from wheelq.tasks import loading

APP = wheelq.App("redis://127.0.0.1:1/0")
NOT_AN_APP = object()
CONNECTS = {"--log-level", "--redis-url", "--config"}
"""`wheelq run`'s flags from the options every connecting command shares."""


def run_parser(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    (subparsers,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    found: argparse.ArgumentParser = subparsers.choices["run"]
    return found


def flags_of(parser: argparse.ArgumentParser) -> set[str]:
    return {flag for action in parser._actions for flag in action.option_strings} - {
        "-h",
        "--help",
    }


def run_flags() -> list[argparse.Action]:
    parser = argparse.ArgumentParser(add_help=False)
    cli_run.add_flags(parser)
    return parser._actions


def every_flag_given() -> list[str]:
    """An argv giving each of `add_flags`' flags a value of its type."""
    argv: list[str] = []
    for n, action in enumerate(run_flags()):
        if action.nargs == 0:  # store_true
            argv.append(action.option_strings[0])
        else:
            value = str(7000 + n) if action.type is int else f"value{n}"
            argv += [action.option_strings[0], value]
    return argv


def test_both_faces_have_exactly_the_flags_add_flags_defines() -> None:
    defined = {flag for action in run_flags() for flag in action.option_strings}
    django = run_parser(command.Command().create_parser("manage.py", "wheelq"))
    assert flags_of(django) == defined
    assert flags_of(run_parser(build_parser())) == defined | CONNECTS


def test_every_flag_is_read_by_run_app_or_is_a_worker_setting() -> None:
    dests = [action.dest for action in run_flags()]
    assert sorted(dests) == sorted(cli_run.RUN_FLAGS + cli_run.WORKER_FLAGS)


def test_both_faces_pass_every_flag_on_to_run_app(monkeypatch: pytest.MonkeyPatch) -> None:
    argv = every_flag_given()
    calls = run_apps(monkeypatch)
    cli(monkeypatch, *argv)
    django(monkeypatch, "run", *argv)

    (cli_args, cli_given, _), (django_args, django_given, _) = calls
    assert (
        django_given == cli_given == {key: getattr(cli_args, key) for key in cli_run.WORKER_FLAGS}
    )
    for key in cli_run.RUN_FLAGS:
        assert getattr(django_args, key) == getattr(cli_args, key), key
    assert cli_args.tasks is not None and cli_args.no_scheduler  # every flag was given


SPECS = [
    (f"{__name__}.APP", f"app must be module:app, got '{__name__}.APP'"),
    ("no_such_module_xyz:app", "no module named 'no_such_module_xyz'"),
    (f"{__name__}:MISSING", f"module {__name__!r} has no attribute 'MISSING'"),
    (f"{__name__}:NOT_AN_APP", "is a object, not a wheelq.App"),
    ("my_tasks.py:app", "'my_tasks.py' is a file name: drop '.py' and pass my_tasks:app"),
]


@pytest.mark.parametrize(("spec", "said"), SPECS)
def test_a_spec_that_names_no_app_is_one_line_the_same_through_both_faces(
    monkeypatch: pytest.MonkeyPatch, spec: str, said: str
) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))  # the CLI puts the cwd on it
    with pytest.raises(CliError) as cli:
        cli_run.load_app(spec)
    assert cli.value.code == 2
    with pytest.raises(ImproperlyConfigured) as django:
        conf.load_app({"APP": spec})
    with pytest.raises(InvalidSpecError) as loaded:
        loading.load_app(spec)
    assert said in str(cli.value)
    assert str(cli.value) == str(loaded.value)
    # the same line, but for the name of what was given
    assert str(django.value) == str(cli.value).replace("app", "WHEELQ['APP']", 1)


def test_a_module_that_raises_is_one_line_on_the_cli_and_its_own_error_in_django(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "raising_tasks_xyz.py").write_text("import wheelq\n\nAPP = 1 / 0\n")
    monkeypatch.syspath_prepend(tmp_path)
    with pytest.raises(CliError) as cli:
        cli_run.load_app("raising_tasks_xyz:APP")
    assert cli.value.code == 1
    assert "importing app module 'raising_tasks_xyz' failed: " in str(cli.value)
    assert "raising_tasks_xyz.py:3: ZeroDivisionError" in str(cli.value)
    with pytest.raises(ZeroDivisionError):
        conf.load_app({"APP": "raising_tasks_xyz:APP"})


def test_topic_and_relay_dsn_reach_run_app_through_both_faces(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--topic`` (repeated) and ``--relay-dsn`` as given, through `wheelq run` and
    ``manage.py wheelq run``; the Django faces wrap each handler in
    `closing_connections`, the CLI's in nothing."""
    flags = ["--topic", "a=m:f", "--topic", "b=m:g", "--relay-dsn", "postgresql://h/db"]
    calls = run_apps(monkeypatch)
    cli(monkeypatch, *flags)
    django(monkeypatch, "run", *flags)
    django(monkeypatch, "worker", *flags[:4])
    (by_cli, _, cli_options), (run, _, run_options), (worker, _, worker_options) = calls
    for given in (by_cli, run, worker):
        assert given.topic == ["a=m:f", "b=m:g"]
    assert by_cli.relay_dsn == run.relay_dsn == "postgresql://h/db"
    assert worker.relay_dsn is None and worker.no_scheduler  # a worker alone
    assert cli_options.get("around") is None
    assert run_options["around"] is worker_options["around"] is database.closing_connections


Call = tuple[argparse.Namespace, dict[str, Any], dict[str, Any]]


def run_apps(monkeypatch: pytest.MonkeyPatch) -> list[Call]:
    """Each call of `run_app` through either face, in place of running: its args, its
    worker settings given and its keyword options."""
    calls: list[Call] = []

    def run_app(
        app: Any, args: argparse.Namespace, given: dict[str, Any], *_: Any, **options: Any
    ) -> int:
        assert app is APP
        calls.append((args, given, options))
        return 0

    monkeypatch.setattr(cli_run, "run_app", run_app)
    monkeypatch.setattr(command, "run_app", run_app)
    return calls


def cli(monkeypatch: pytest.MonkeyPatch, *argv: str) -> None:
    """``wheelq run MODULE:APP ARGV``."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    args = build_parser().parse_args(["run", f"{__name__}:APP", *argv])
    assert cli_run.run(Context(args, {}, {})) == 0


def django(monkeypatch: pytest.MonkeyPatch, *argv: str) -> None:
    """``manage.py wheelq ARGV`` with `APP` as the project's app."""

    class Config:
        app = APP

    monkeypatch.setattr(command.apps, "get_app_config", lambda label: Config)
    project = argparse.Namespace(WHEELQ={"APP": "m:APP"}, DATABASES=DATABASES)
    monkeypatch.setattr(command, "settings", project)
    monkeypatch.setattr(command.logging, "basicConfig", lambda **_: None)
    parser = command.Command().create_parser("manage.py", "wheelq")
    command.Command().handle(**vars(parser.parse_args(list(argv))))


def django_parser(action: str) -> argparse.ArgumentParser:
    return run_parser_named(command.Command().create_parser("manage.py", "wheelq"), action)


def run_parser_named(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    (subparsers,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    found: argparse.ArgumentParser = subparsers.choices[name]
    return found


@pytest.mark.parametrize(
    ("action", "dests"),
    [("worker", cli_run.WORKER_ROLE), ("scheduler", cli_run.SCHEDULER_ROLE)],
)
def test_django_worker_and_scheduler_take_run_flags_of_their_role(
    action: str, dests: tuple[str, ...]
) -> None:
    parser = argparse.ArgumentParser(add_help=False)
    cli_run.add_flags(parser, dests)
    assert flags_of(django_parser(action)) == flags_of(parser)
    assert set(dests) <= set(cli_run.RUN_FLAGS + cli_run.WORKER_FLAGS)


def test_django_relay_takes_wheelq_relays_flags() -> None:
    relay = run_parser_named(build_parser(), "relay")
    assert flags_of(django_parser("relay")) == flags_of(relay) - CONNECTS


def test_django_scheduler_and_relay_pass_their_flags_on(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Any] = []
    monkeypatch.setattr(
        command, "run_scheduler", lambda app, args, given, **_: calls.append((args, given)) or 0
    )
    monkeypatch.setattr(
        command, "serve_relay", lambda url, options, values: calls.append(values) or 0
    )
    django(monkeypatch, "scheduler", "--tasks", "x", "--topic", "p", "--metrics-port", "9")
    django(monkeypatch, "relay", "--ack", "replicated")
    (scheduler, given), values = calls
    assert scheduler.tasks == ["x"] and scheduler.topic == ["p"] and given == {"metrics_port": 9}
    assert values == {"ack": "replicated", "dsn": database.relay_dsn(DATABASES)}


DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "shop",
        "USER": "app",
        "PASSWORD": "it's \\ secret",
        "HOST": "db.internal",
        "PORT": 5433,
        "OPTIONS": {"sslmode": "require", "pool": True, "isolation_level": 1},
    }
}


def test_relay_dsn_is_the_project_databases_as_libpq_reads_it() -> None:
    psycopg = pytest.importorskip("psycopg")
    dsn = database.relay_dsn(DATABASES)
    assert psycopg.conninfo.conninfo_to_dict(dsn) == {
        "dbname": "shop",
        "user": "app",
        "password": "it's \\ secret",
        "host": "db.internal",
        "port": "5433",
        "sslmode": "require",
    }


@pytest.mark.parametrize(
    "databases",
    [{}, {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": "db.sqlite3"}}],
)
def test_relay_dsn_refuses_a_project_without_a_postgresql_database(databases: Any) -> None:
    with pytest.raises(ImproperlyConfigured) as refused:
        database.relay_dsn(databases)
    assert "DATABASES['default'] to be a PostgreSQL database" in str(refused.value)
    assert "pass --dsn" in str(refused.value)
