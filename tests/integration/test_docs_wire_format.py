"""docs/reference/wire-format.md's "Reading it without wheelq" runs as written, on a server
of the test's own, and reads back what wheelq wrote: the fired job's entry and payload,
and the pending job's due time and envelope."""

from __future__ import annotations

import time
from contextlib import redirect_stdout
from io import StringIO

from tests.support.docs import run_code, snippets
from tests.support.servers import dedicated_server
from wheelq.testing import ServerBinary


def test_wire_format_reading_example_runs_as_written(server_binary: ServerBinary) -> None:
    with dedicated_server(server_binary) as server:
        found = snippets(
            "docs/reference/wire-format.md", "Reading it without wheelq", f"{server.url}/0"
        )
        assert len(found.code) == 2, found.code  # the fired job, then the pending one
        out = StringIO()
        before_ms = time.time() * 1000
        with redirect_stdout(out):
            ns = run_code(found.code, f"{server.url}/0")
    assert ns["payload"] == {"invoice": 42, "amount": "19.90"}
    assert 0 <= ns["late_ms"] < 5_000  # type: ignore[operator]
    assert ns["version"] == 1 and ns["attempt"] == 1 and ns["max_attempts"] == 5
    assert abs(ns["enqueued_ms"] - before_ms) < 60_000  # type: ignore[operator]
    assert abs(ns["due_ms"] - ns["enqueued_ms"] - 3_600_000) < 1_000  # type: ignore[operator]
    lines = out.getvalue().splitlines()
    assert lines[0] == "{'invoice': 42, 'amount': '19.90'} attempt 1 of 5", lines
    assert lines[1].startswith("{'invoice': 43} due at "), lines
    assert lines[1].endswith(" attempt 1 of 5"), lines
