"""`wheelq job TOPIC ID`: where one job is in its life (`Client.get`), for people or as JSON."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from wheelq.cli.context import Context
from wheelq.cli.errors import CliError
from wheelq.core.payload import jsonable
from wheelq.core.schedule import utc_text

if TYPE_CHECKING:
    from wheelq.core.history import GroupInfo, JobInfo


def register(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Add the ``job`` command."""
    p = sub.add_parser("job", parents=parents, help="show one job's state, whatever it is")
    p.add_argument("topic")
    p.add_argument("job_id")
    p.add_argument("--json", action="store_true", help="print the JobInfo as one JSON object")
    p.set_defaults(func=show)


def show(ctx: Context) -> int:
    """Print the job's state; exit 1 when nothing is known of it."""
    from wheelq.core.history import JobState
    from wheelq.web import as_json

    with ctx.client() as client:
        info = client.get(ctx.args.topic, ctx.args.job_id)
    if ctx.args.json:
        print(json.dumps(as_json(info), sort_keys=True))
    else:
        print(render(info))
    if info.state is JobState.UNKNOWN:
        raise CliError(
            f"nothing is known of job {info.id!r} on {info.topic!r}: never enqueued there, "
            "or its history is past retention"
        )
    return 0


def _first_line(text: str | None) -> str:
    from wheelq.core.retry import error_line

    return error_line(text) or "-"


def render(info: JobInfo) -> str:
    """The JobInfo as aligned lines (only the fields its state has)."""
    rows: list[tuple[str, str]] = [("job", f"{info.id} on {info.topic}"), ("state", info.state)]
    if info.due_ms is not None:
        rows.append(("due", utc_text(info.due_ms)))
    if info.attempt is not None:
        rows.append(("attempt", f"{info.attempt} of {info.max_attempts}"))
    if info.fired_ms is not None:
        rows.append(("fired", f"{utc_text(info.fired_ms)} (entry {info.entry_id})"))
    if info.cancelled_ms is not None:
        rows.append(("cancelled", utc_text(info.cancelled_ms)))
    if info.last_error:
        rows.append(("last error", _first_line(info.last_error)))
    if info.payload is not None:
        rows.append(("payload", json.dumps(jsonable(info.payload))[:200]))
    rows += [(f"group {g.group}", _group(g)) for g in info.groups]
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


def _group(g: GroupInfo) -> str:
    parts = [str(g.state)]
    if g.consumer is not None:
        parts.append(f"on {g.consumer} since {utc_text(g.since_ms)}, delivery {g.deliveries}")
    if g.finished_ms is not None:
        parts.append(f"at {utc_text(g.finished_ms)}")
    if g.duration_ms is not None:
        parts.append(f"ran {g.duration_ms} ms")
    if g.reason:
        parts.append(f"({g.reason}: {_first_line(g.error)}; dead letter {g.dead_entry_id})")
    return ", ".join(parts)
