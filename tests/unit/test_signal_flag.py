"""`SignalFlag`: a stop signal waited for without a lock (issue 43 item 19), and no signal
handler in the code that sets a `threading.Event` (the handler that hung a producer)."""

from __future__ import annotations

import ast
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from wheelq.cli.signals import SignalFlag

ROOT = Path(__file__).resolve().parents[2]
SIG = signal.SIGUSR2


@pytest.fixture
def flag() -> Iterator[SignalFlag]:
    before = signal.getsignal(SIG)
    made = SignalFlag(SIG)
    try:
        yield made
    finally:
        made.close()
    assert signal.getsignal(SIG) is before


def test_a_signal_raised_on_the_main_thread_sets_the_flag(flag: SignalFlag) -> None:
    assert not flag.wait(0.01)
    signal.raise_signal(SIG)
    assert flag.is_set()
    assert flag.wait(0) and flag.received == SIG


def test_a_wait_ends_soon_after_a_signal_sent_from_another_thread(flag: SignalFlag) -> None:
    timer = threading.Timer(0.05, os.kill, (os.getpid(), SIG))
    began = time.monotonic()
    timer.start()
    try:
        assert flag.wait(30)
    finally:
        timer.join()
    assert time.monotonic() - began < 5  # the POLL_S bound, and slack for a loaded machine


def _sets_an_event(handler: ast.expr, functions: dict[str, ast.AST]) -> bool:
    body = functions.get(handler.id) if isinstance(handler, ast.Name) else handler
    return body is not None and any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "set"
        for n in ast.walk(body)
    )


def test_no_signal_handler_sets_a_threading_event() -> None:
    """Python runs a handler on the main thread, maybe while that thread holds the lock
    of the Event the handler sets (inside its `wait`): use `SignalFlag`."""
    found = []
    for folder in ("wheelq", "loadtest", "tests"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "node_modules" in path.parts:  # npm's (loadtest/peers), not ours
                continue
            tree = ast.parse(path.read_text())
            functions: dict[str, ast.AST] = {
                n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)
            }
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.Call)
                    and ast.unparse(node.func) == "signal.signal"
                    and len(node.args) == 2
                    and _sets_an_event(node.args[1], functions)
                ):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == []
