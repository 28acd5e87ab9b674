"""The docs' code blocks (README.md and docs/), as the tests that run them read them.

Every ``python`` and shell block either runs in a test or says why not: an HTML comment
``<!-- not run: REASON -->`` on the line before its fence. A block runs when its page
section is in `RUN`, which names the test that runs it; `tests/unit/test_docs_blocks.py`
checks both. `snippets` hands a test the blocks of one section: Python blocks that start
with a ``# NAME.py`` line become files, every other Python block is code to run in order,
and each command of a shell block (a line, or lines joined by a backslash or an open
quote) is an argv. The docs' Redis URL (a ``redis://`` URL of localhost, Redis's usual
port, database 0: `README_URL`), the HTTP service's address (``localhost:8080``) and the
docs' PostgreSQL (`DOCS_DSN`) are swapped for the test's own.
"""

from __future__ import annotations

import builtins
import re
import shlex
import subprocess
import symtable
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import redis

from tests.support import cli
from tests.support.cli import ROOT, clean_env, wheelq_argv
from wheelq.core.keys import all_shards

DOCS = ROOT / "docs"
README_URL = re.compile(r"redis://(?:localhost|127\.0\.0\.1):\d+/0")
DOCS_DSN = re.compile(r"(?<=://)app:secret@localhost:5432/app\b")
"""The docs' PostgreSQL after its scheme (``postgresql://`` or SQLAlchemy's
``postgresql+psycopg://``): user app, password secret, database app, on localhost."""
FENCE = re.compile(
    r"^(?P<indent>[ ]*)```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ ]*$",
    re.DOTALL | re.MULTILINE,
)
# The marker's comment ends right before the fence, and its reason holds no "-->": so a
# comment of another kind there (a snippet's end mark) is no marker, whatever came before.
NOT_RUN = re.compile(r"<!--\s*not run:\s*(?P<why>(?:(?!-->).)+?)\s*-->\s*\n\s*\Z", re.DOTALL)
HEADING = re.compile(r"^## (.+?)\s*$", re.MULTILINE)
PYTHON = ("python", "py", "pycon")
SHELL = ("bash", "sh", "shell", "console")
CHECKED = PYTHON + SHELL

# (page, section) -> the test that runs the section's blocks, as "file::function". A page
# whose every section runs has the section "*". The docs checker makes sure each named
# test exists and names its page and section.
RUN: dict[tuple[str, str], str] = {
    ("docs/guides/workflows.md", "Run a job after another"): (
        "tests/integration/test_docs_guides.py::test_the_workflows_guide_runs_as_written"
    ),
    ("docs/guides/workflows.md", "Join: a parent after its children"): (
        "tests/integration/test_docs_guides.py::test_the_workflows_guide_runs_as_written"
    ),
    ("docs/guides/workflows.md", "Flows inside flows"): (
        "tests/integration/test_docs_guides.py::test_the_workflows_guide_runs_as_written"
    ),
    ("docs/guides/workflows.md", "Whole trees"): (
        "tests/integration/test_docs_guides.py::test_the_workflows_guide_runs_as_written"
    ),
    ("docs/guides/priority.md", "Give a job a priority"): (
        "tests/integration/test_docs_guides.py::test_the_priority_guide_runs_as_written"
    ),
    ("docs/guides/priority.md", "Fair shares by key"): (
        "tests/integration/test_docs_guides.py::test_the_priority_guide_runs_as_written"
    ),
    ("docs/operations/deploying.md", "The image"): (
        "tests/integration/test_container.py::test_the_image_is_built_as_the_deploying_page_says"
    ),
    ("docs/operations/deploying.md", "Your application's image"): (
        "tests/integration/test_container.py::test_the_app_image_runs_its_tasks_as_the_page_says"
    ),
    ("docs/operations/autoscaling.md", "An example"): (
        "tests/integration/test_docs_guides.py::test_autoscaling_example_runs_as_written"
    ),
    ("docs/operations/alerts.md", "Loading the rules"): (
        "tests/unit/test_alert_rules.py::test_the_runbooks_promtool_commands_pass_as_written"
    ),
    ("README.md", ""): (
        "tests/integration/test_readme.py::test_readme_set_up_commands_are_the_ones_ci_and_the_demo_run"
    ),
    ("README.md", "Quickstart"): (
        "tests/integration/test_readme.py::test_readme_quickstart_runs_as_written"
    ),
    ("docs/guides/http-service.md", "Start it"): (
        "tests/integration/test_docs_http.py::test_http_service_guide_runs_as_written"
    ),
    ("docs/guides/http-service.md", "Enqueue, look up, move and cancel jobs"): (
        "tests/integration/test_docs_http.py::test_http_service_guide_runs_as_written"
    ),
    ("docs/guides/http-service.md", "Read an error"): (
        "tests/integration/test_docs_http.py::test_http_service_guide_runs_as_written"
    ),
    ("docs/guides/http-service.md", "Manage schedules, limits and topics"): (
        "tests/integration/test_docs_http.py::test_http_service_guide_runs_as_written"
    ),
    ("docs/guides/http-service.md", "Give access with tokens"): (
        "tests/integration/test_docs_http.py::test_http_service_tokens_run_as_written"
    ),
    ("docs/guides/pull.md", "*"): (
        "tests/integration/test_docs_http.py::test_pull_guide_runs_as_written"
    ),
    ("docs/guides/callbacks.md", "Verify a callback"): (
        "tests/integration/test_callback_receiver.py::test_a_replay_with_another_wheelq_id_is_a_repeat_for_the_receiver"
    ),
    ("docs/reference/wire-format.md", "Reading it without wheelq"): (
        "tests/integration/test_docs_wire_format.py::"
        "test_wire_format_reading_example_runs_as_written"
    ),
    ("docs/guides/tasks.md", "Write a task"): (
        "tests/integration/test_docs_guides.py::test_tasks_guide_runs_as_written"
    ),
    ("docs/guides/tasks.md", "Run it"): (
        "tests/integration/test_docs_guides.py::test_tasks_guide_runs_as_written"
    ),
    ("docs/guides/tasks.md", "Enqueue it later"): (
        "tests/integration/test_docs_guides.py::test_tasks_guide_runs_as_written"
    ),
    ("docs/guides/tasks.md", "From asyncio"): (
        "tests/integration/test_docs_guides.py::test_tasks_guide_runs_as_written"
    ),
    ("docs/guides/tasks.md", "In FastAPI and Starlette"): (
        "tests/integration/test_docs_guides.py::test_tasks_guide_runs_as_written"
    ),
    ("docs/guides/tasks.md", "The job's context"): (
        "tests/integration/test_job_context.py::test_the_tasks_guides_job_context_runs_as_written"
    ),
    ("docs/guides/migrating.md", "From Celery, ported"): (
        "tests/integration/test_docs_guides.py::test_the_migrating_guides_celery_app_runs_ported_whole"
    ),
    ("docs/guides/tasks.md", "Periodic tasks"): (
        "tests/integration/test_periodic_tasks.py::test_the_tasks_guides_periodic_tasks_run_as_written"
    ),
    ("docs/guides/producing.md", "Connect a client"): (
        "tests/integration/test_docs_guides.py::test_producing_guide_runs_as_written"
    ),
    ("docs/guides/producing.md", "Enqueue a job with a delay or at a time"): (
        "tests/integration/test_docs_guides.py::test_producing_guide_runs_as_written"
    ),
    ("docs/guides/producing.md", "Give a job an expiry"): (
        "tests/integration/test_docs_guides.py::test_producing_guide_runs_as_written"
    ),
    ("docs/guides/producing.md", "Enqueue many jobs at once"): (
        "tests/integration/test_docs_guides.py::test_producing_guide_runs_as_written"
    ),
    ("docs/guides/producing.md", "Choose your own job ids"): (
        "tests/integration/test_docs_guides.py::test_producing_guide_runs_as_written"
    ),
    ("docs/guides/producing.md", "Cancel a job"): (
        "tests/integration/test_docs_guides.py::test_producing_guide_runs_as_written"
    ),
    ("docs/guides/producing.md", "Reschedule a job"): (
        "tests/integration/test_docs_guides.py::test_producing_guide_runs_as_written"
    ),
    ("docs/guides/producing.md", "Find, cancel or move a key's jobs"): (
        "tests/integration/test_docs_guides.py::test_producing_guide_runs_as_written"
    ),
    ("docs/guides/producing.md", "Follow a job's whole life"): (
        "tests/integration/test_docs_guides.py::test_producing_guide_runs_as_written"
    ),
    ("docs/guides/producing.md", "See a topic's counts"): (
        "tests/integration/test_docs_guides.py::test_producing_guide_runs_as_written"
    ),
    ("docs/guides/producing.md", "Drop a topic"): (
        "tests/integration/test_docs_guides.py::test_producing_guide_runs_as_written"
    ),
    ("docs/guides/workers.md", "Write a handler"): (
        "tests/integration/test_docs_guides.py::test_workers_guide_runs_as_written"
    ),
    ("docs/guides/workers.md", "Run a worker"): (
        "tests/integration/test_docs_guides.py::test_workers_guide_runs_as_written"
    ),
    ("docs/guides/workers.md", "Retry, defer or fail a job"): (
        "tests/integration/test_docs_guides.py::test_workers_guide_runs_as_written"
    ),
    ("docs/guides/workers.md", "Return a result"): (
        "tests/integration/test_docs_guides.py::test_workers_guide_runs_as_written"
    ),
    ("docs/guides/producing.md", "Wait for a job's result"): (
        "tests/integration/test_docs_guides.py::test_producing_guide_runs_as_written"
    ),
    ("docs/guides/workers.md", "Run handlers concurrently"): (
        "tests/integration/test_docs_guides.py::test_workers_guide_runs_as_written"
    ),
    ("docs/guides/workers.md", "Serve several topics with weights"): (
        "tests/integration/test_docs_guides.py::test_workers_guide_runs_as_written"
    ),
    ("docs/guides/workers.md", "Limit how long a handler runs"): (
        "tests/integration/test_docs_guides.py::test_workers_guide_runs_as_written"
    ),
    ("docs/guides/workers.md", "Fan out to several consumer groups"): (
        "tests/integration/test_docs_guides.py::test_workers_guide_runs_as_written"
    ),
    ("docs/guides/workers.md", "List and delete consumer groups"): (
        "tests/integration/test_docs_guides.py::test_workers_guide_runs_as_written"
    ),
    ("docs/guides/workers.md", "Pause and resume"): (
        "tests/integration/test_docs_guides.py::test_workers_guide_runs_as_written"
    ),
    ("docs/guides/workers.md", "Follow job events"): (
        "tests/integration/test_docs_guides.py::test_workers_guide_runs_as_written"
    ),
    ("docs/guides/workers.md", "Keep running through a Redis outage"): (
        "tests/integration/test_docs_guides.py::test_workers_guide_runs_as_written"
    ),
    ("docs/guides/schedules.md", "Declare a schedule"): (
        "tests/integration/test_docs_guides.py::test_schedule_guide_runs_as_written"
    ),
    ("docs/guides/schedules.md", "Inspect, pause and remove schedules"): (
        "tests/integration/test_docs_guides.py::test_schedule_guide_runs_as_written"
    ),
    ("docs/guides/schedules.md", "From the command line"): (
        "tests/integration/test_docs_guides.py::test_schedule_guide_runs_as_written"
    ),
    ("docs/guides/flow-control.md", "Bound what a topic holds"): (
        "tests/integration/test_docs_guides.py::test_flow_control_guide_runs_as_written"
    ),
    ("docs/guides/flow-control.md", "Limit how fast a group starts jobs"): (
        "tests/integration/test_docs_guides.py::test_flow_control_guide_runs_as_written"
    ),
    ("docs/guides/flow-control.md", "Run one key's jobs in order"): (
        "tests/integration/test_docs_guides.py::test_flow_control_guide_runs_as_written"
    ),
    ("docs/guides/flow-control.md", "Debounce a burst of enqueues"): (
        "tests/integration/test_docs_guides.py::test_flow_control_guide_runs_as_written"
    ),
    ("docs/guides/durability.md", "Keep enqueueing while Redis is away"): (
        "tests/integration/test_docs_guides.py::test_durability_guide_runs_as_written"
    ),
    ("docs/guides/durability.md", "Watch the spool"): (
        "tests/integration/test_docs_guides.py::test_durability_guide_runs_as_written"
    ),
    ("docs/guides/durability.md", "Wait for the primary's own disk"): (
        "tests/integration/test_docs_guides.py::test_durability_guide_runs_as_written"
    ),
    ("docs/guides/outbox.md", "Create the tables"): (
        "tests/integration/test_docs_outbox.py::test_outbox_guide_runs_as_written"
    ),
    ("docs/guides/outbox.md", "Connections"): (
        "tests/integration/test_docs_outbox.py::test_outbox_guide_runs_as_written"
    ),
    ("docs/guides/outbox.md", "Run the relay"): (
        "tests/integration/test_docs_outbox.py::test_outbox_guide_runs_as_written"
    ),
    ("docs/guides/outbox.md", "Effects once in a task"): (
        "tests/integration/test_job_context.py::test_the_outbox_guides_task_applies_its_effects_once"
    ),
    ("docs/guides/outbox.md", "Effects exactly once"): (
        "tests/integration/test_docs_outbox.py::test_outbox_guide_runs_as_written"
    ),
    ("docs/guides/tracing.md", "Trace jobs with OpenTelemetry"): (
        "tests/integration/test_docs_guides.py::test_tracing_guide_runs_as_written"
    ),
    ("docs/guides/tracing.md", "Carry a trace context without OpenTelemetry"): (
        "tests/integration/test_docs_guides.py::test_tracing_guide_runs_as_written"
    ),
    ("docs/guides/testing.md", "Test a handler end to end"): (
        "tests/integration/test_docs_guides.py::test_testing_example_passes_as_written"
    ),
    ("docs/guides/testing.md", "Eager mode"): (
        "tests/integration/test_eager_outbox.py::test_testing_guide_eager_mode_passes_as_written"
    ),
}


@dataclass(frozen=True, slots=True)
class Block:
    """One fenced block of a page."""

    page: str  # relative to the repository root, e.g. "docs/guides/producing.md"
    section: str  # the title of the `## ` heading above it ("" before the first)
    lang: str
    body: str  # dedented to the fence's indent
    line: int  # of the opening fence, from 1
    not_run: str | None  # the reason, when marked as not run

    @property
    def checked(self) -> bool:
        """A Python or shell block: it must run or say why not."""
        return self.lang in CHECKED

    @property
    def runs(self) -> bool:
        """Run by the test `RUN` names for its section (or for its whole page)."""
        return (self.page, self.section) in RUN or (self.page, "*") in RUN


def pages() -> list[Path]:
    """README.md and every Markdown page of the site."""
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def blocks(page: Path | str) -> list[Block]:
    """The fenced blocks of `page` (a path, or one relative to the repository root)."""
    path = ROOT / page
    text = path.read_text("utf-8")
    name = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.as_posix()
    headings = [(m.start(), m[1]) for m in HEADING.finditer(text)]
    out = []
    for m in FENCE.finditer(text):
        section = ""
        for start, title in headings:
            if start > m.start():
                break
            section = title
        indent = len(m["indent"])
        body = "".join(line[indent:] for line in m["body"].splitlines(keepends=True))
        before = text[: m.start()]
        marked = NOT_RUN.search(before[-400:])
        out.append(
            Block(
                page=name,
                section=section,
                lang=m["lang"],
                body=body,
                line=before.count("\n") + 1,
                not_run=marked["why"] if marked else None,
            )
        )
    return out


@dataclass
class Snippets:
    """A section's runnable blocks: files to write, code to run, and shell commands, in order."""

    files: dict[str, str] = field(default_factory=dict)
    code: list[str] = field(default_factory=list)
    commands: list[list[str]] = field(default_factory=list)


def snippets(page: str, title: str, url: str = "", *, port: int = 0, dsn: str = "") -> Snippets:
    """The blocks of `page`'s section `title` (``*``: the whole page) not marked as not run,
    with `url` for the docs' Redis URL, `port` for the HTTP service's (8080) and `dsn` (a
    ``postgresql://`` URL) for the docs' PostgreSQL."""
    assert (page, title) in RUN, f"{page} {title!r} is not registered in RUN"
    out = Snippets()
    found = False
    for block in blocks(page):
        if not block.checked or block.not_run is not None:
            continue
        if title != "*" and block.section != title:
            continue
        found = True
        body = README_URL.sub(url, block.body) if url else block.body
        body = body.replace("localhost:8080", f"127.0.0.1:{port}") if port else body
        body = with_dsn(body, dsn) if dsn else body
        if url:
            assert "localhost:" not in body, body  # a URL the substitution missed
        if block.lang in PYTHON:
            name = re.match(r"# (\w+\.py)\n", body)
            if name:
                out.files[name[1]] = body
            else:
                out.code.append(body)
        else:
            out.commands += shell_commands(body)
    assert found, f"{page} {title!r} has no block to run"
    return out


def with_dsn(text: str, dsn: str) -> str:
    """`text` with the docs' PostgreSQL (`DOCS_DSN`) swapped for `dsn`'s, whatever the scheme."""
    return DOCS_DSN.sub(lambda _: dsn.split("://", 1)[1], text)


def shell_commands(body: str) -> list[list[str]]:
    """Each command of a shell block as its argv (comments and ``$ `` prompts dropped): a
    line ends a command unless it ends in a backslash or leaves a quote open."""
    out: list[list[str]] = []
    pending = ""
    for line in body.splitlines():
        pending += line.removeprefix("$ ") if not pending else line
        if pending.endswith("\\"):
            pending = pending[:-1]
            continue
        try:
            argv = shlex.split(pending, comments=True)
        except ValueError:  # a quote still open: the command goes on
            pending += "\n"
            continue
        pending = ""
        if argv:
            out.append(argv)
    assert not pending, f"an unfinished command: {pending!r}"
    return out


def argv_of(command: list[str]) -> list[str]:
    """The argv that runs a docs command here: `wheelq` and `python` from this environment."""
    if command[0] == "wheelq":
        return wheelq_argv(*command[1:])
    assert command[0] == "python", command
    return [cli.PYTHON, *command[1:]]


def run_command(command: list[str], cwd: Path, timeout: float = 60) -> str:
    """Run a docs command to completion; it must exit 0 without a traceback. Its stdout."""
    done = subprocess.run(
        argv_of(command), cwd=cwd, env=clean_env(), capture_output=True, text=True,
        timeout=timeout, check=False,
    )  # fmt: skip
    assert done.returncode == 0, (command, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, (command, done.stderr)
    return done.stdout


def handled_by(redis_sync: redis.Redis, topic: str, groups: set[bytes]) -> bool:
    """Nothing pending on `topic`, and each of `groups` has read and acked every entry."""
    shards = redis_sync.hget("wheelq:topics", topic)
    if shards is None:
        return False
    for keys in all_shards(topic, int(shards)):
        if redis_sync.zcard(keys.delayed) or not redis_sync.exists(keys.ready):
            return False
        info = redis_sync.xinfo_groups(keys.ready)
        if {g["name"] for g in info} != groups or any(g["pending"] or g["lag"] for g in info):
            return False
    return True


def count(redis_sync: redis.Redis, topic: str, key: str) -> int:
    """Entries in `topic`'s `key` stream (``ready``, ``dead``) or sorted set (``delayed``)."""
    shards = int(redis_sync.hget("wheelq:topics", topic) or 0)
    size = redis_sync.zcard if key == "delayed" else redis_sync.xlen
    return sum(size(getattr(k, key)) for k in all_shards(topic, shards))


class Services:
    """Background commands, each with its stdout and stderr in a file of its own."""

    def __init__(self, cwd: Path, stack: ExitStack) -> None:
        self.cwd, self.stack = cwd, stack
        self.running: list[tuple[list[str], subprocess.Popen[str], IO[str], IO[str]]] = []

    def start(self, command: list[str]) -> None:
        n = len(self.running)
        out, err = (self.stack.enter_context((self.cwd / f"{n}.{x}").open("w+")) for x in "oe")
        proc = subprocess.Popen(
            argv_of(command), cwd=self.cwd, env=clean_env(), stdout=out, stderr=err, text=True
        )
        self.stack.callback(proc.kill)  # a no-op once it has exited
        self.running.append((command, proc, out, err))

    def alive(self) -> bool:
        """True; fails the test at once if one of them has exited."""
        for command, proc, _, err in self.running:
            if proc.poll() is not None:
                err.seek(0)
                raise AssertionError(f"{command} exited with {proc.returncode}: {err.read()}")
        return True

    def stop(self) -> dict[str, str]:
        """SIGTERM each; each must exit 0 without a traceback. Returns stdout by handler spec
        (or command name)."""
        for _, proc, _, _ in self.running:
            proc.terminate()
        printed = {}
        for command, proc, out, err in self.running:
            proc.wait(timeout=30)
            out.seek(0)
            err.seek(0)
            log = err.read()
            assert proc.returncode == 0, (command, log)
            assert "Traceback" not in log, log
            printed[command[2] if command[1] == "worker" else command[1]] = out.read()
        return printed


def run_code(code: list[str], url: str) -> dict[str, object]:
    """Run a page's Python blocks in order in one namespace (as a reader pasting them into
    one interpreter would), the docs' Redis URL being `url`. Returns the namespace."""
    namespace: dict[str, object] = {"__name__": "__docs__"}
    for n, body in enumerate(code):
        source = README_URL.sub(url, body)
        # dont_inherit: not this module's `from __future__ import annotations`, which a
        # reader's interpreter lacks (SQLAlchemy reads a mapped class's annotations)
        exec(compile(source, f"<docs block {n}>", "exec", dont_inherit=True), namespace)
    return namespace


NEEDS = re.compile(r"\A(?:# \S+\.py\n)?# needs: (?P<names>[\w, ]+?)(?: \(.*\))?\n")
"""A snippet's first comment when it goes on from earlier ones on its page: ``# needs:
client, URL (from "Connect a client")``: what to paste before it."""


def free_names(code: str) -> set[str]:
    """The names `code` uses that it neither defines nor imports, and that are no builtins:
    what pasting it alone into a fresh interpreter would lack."""
    top = symtable.symtable(code, "<snippet>", "exec")
    used: set[str] = set()

    def walk(table: symtable.SymbolTable) -> None:
        for symbol in table.get_symbols():
            if (table is top and symbol.is_referenced()) or symbol.is_global():
                used.add(symbol.get_name())
        for child in table.get_children():
            walk(child)

    walk(top)
    return used - defined_names(code) - set(dir(builtins))


def defined_names(code: str) -> set[str]:
    """The names `code` defines or imports at its top level."""
    return {
        s.get_name()
        for s in symtable.symtable(code, "<snippet>", "exec").get_symbols()
        if s.is_assigned() or s.is_imported() or s.is_namespace()
    }


def iter_checked() -> Iterator[Block]:
    """Every Python and shell block of every page."""
    for page in pages():
        for block in blocks(page):
            if block.checked:
                yield block
