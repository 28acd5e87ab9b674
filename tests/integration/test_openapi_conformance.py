"""Schemathesis against the live service (`wheelq serve` on a real server): generated and
mutated requests to every operation of its OpenAPI document, with every check but one:
no answer is a 5xx, every status, content type, header and body is the documented one,
schema-valid input is accepted and schema-invalid input refused (so the document and the
server agree), and auth is not ignored.

``use_after_free`` is left out because a cancelled job stays visible, as ``cancelled``, by
design. Where a rule cannot be said in JSON Schema (a due time at most ten years from now,
a receipt this deployment sealed, ...) `schemathesis.toml` beside this file lets that
operation's valid-looking input be 422 too, and names the rule. The seed is fixed so CI is
repeatable (about 2,000 requests, under a minute on 2 CPUs: schemathesis runs through
`tests.support.fuzz`, which builds each regex character class once a run, not once per
operation, phase and parameter); set ``WHEELQ_FUZZ_SEED`` (and ``WHEELQ_FUZZ_EXAMPLES``) to
explore further. The HTTP layer is the same on every server, so this runs on one
(tests/integration/conftest.py).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.support.cli import ROOT, clean_env, start_wheelq, stop
from tests.support.http import get_status
from tests.support.servers import free_port
from tests.support.waiting import eventually_sync


@pytest.mark.timeout(600)  # the whole run: under a minute alone on 2 CPUs
def test_the_live_service_conforms_to_its_openapi_document(redis_url: str) -> None:
    port = free_port()
    proc = start_wheelq("serve", "--redis-url", redis_url, "--port", str(port), "--deliver", "none")
    base = f"http://127.0.0.1:{port}"
    try:
        eventually_sync(lambda: get_status(f"{base}/healthz") == 200, timeout_s=30, what="serve")
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "tests.support.fuzz",  # schemathesis's command line, its regex classes memoized
                "--config-file",
                str(Path(__file__).with_name("schemathesis.toml")),
                "run",
                f"{base}/openapi.json",
                "--checks",
                "all",
                "--exclude-checks",
                "use_after_free",
                "--max-examples",
                os.environ.get("WHEELQ_FUZZ_EXAMPLES", "10"),
                "--seed",
                os.environ.get("WHEELQ_FUZZ_SEED", "1"),
                "--workers",
                "1",  # 2 trips a CPython 3.11 bug in schemathesis's threads (ast recursion)
                "--request-timeout",
                "40",
                "--max-response-time",
                "35",
                "--no-color",
                "--generation-database",
                "none",
                # Generating ids that match the printable-characters pattern is slow on a
                # busy CI machine; it says nothing about the server.
                "--suppress-health-check",
                "too_slow",
            ],
            env=clean_env(),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=540,
            check=False,
        )
    finally:
        _, err = stop(proc)
    # A generated value can be kilobytes of %-escapes: shortened, and the failures section
    # (the operation, its check, the request to reproduce it) leads the message, before the
    # warnings and summary that end the output.
    out = re.sub(r"(%[0-9A-Fa-f]{2}){20,}", "%…", done.stdout)
    failures = out.find("FAILURES")
    summary = (out[failures : failures + 6000] + "\n…\n" if failures >= 0 else "") + out[-2000:]
    assert done.returncode == 0, summary
    selected = re.search(r"Selected: (\d+)/(\d+)\s+Tested: (\d+)", done.stdout)
    assert selected is not None, summary
    chosen, total, tested = map(int, selected.groups())
    # every operation, each tested, but those schemathesis.toml turns off (and says why)
    assert (chosen, tested) == (total - len(turned_off()), total - len(turned_off())), selected[0]
    assert "5xx" not in err and "Traceback" not in err, err[-3000:]


def turned_off() -> list[str]:
    """The operations schemathesis.toml leaves out of the fuzz run (``enabled = false``)."""
    config = tomllib.loads(Path(__file__).with_name("schemathesis.toml").read_text("utf-8"))
    return [op["include-name"] for op in config["operations"] if op.get("enabled") is False]
