"""store.executor.plan with scripted replies (no server): what goes again after MOVED,
NOSCRIPT, TRYAGAIN and a broken connection, and keyless calls apart on a cluster."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator
from typing import Any

import pytest
from redis.exceptions import ConnectionError, MovedError, NoScriptError, TryAgainError

from wheelq.core.keys import ShardKeys
from wheelq.store import enqueue, executor, observe, server
from wheelq.store.call import Call
from wheelq.store.executor import (
    Load,
    Pause,
    Pipeline,
    Reload,
    Switch,
    drive,
    drive_async,
    plan,
)

KEYS = ShardKeys("t", 0)


def cancel(job_id: str) -> Call[bool]:
    return enqueue.cancel(KEYS, job_id)


def run(
    calls: list[Call[Any]],
    answer: Callable[[list[Call[Any]]], list[Any]],
    *,
    switched: bool = True,
    reloaded: bool = True,
    cluster: bool = False,
) -> tuple[list[Any], list[Any]]:
    """Drive `plan`, answering each pipeline with `answer(calls)`; (raw replies, requests)."""
    requests: list[Any] = []

    def do(request: Any) -> Any:
        requests.append(request)
        if isinstance(request, Pipeline):
            return answer(list(request.calls))
        if isinstance(request, Switch):
            return switched
        if isinstance(request, Reload):
            return reloaded
        return None

    return drive(plan(calls, lambda: cluster), do), requests


def test_moved_calls_go_again_after_the_switch_and_only_they() -> None:
    calls = [cancel("a"), cancel("b")]
    sent: list[list[Call[Any]]] = []

    def answer(batch: list[Call[Any]]) -> list[Any]:
        sent.append(batch)
        return [MovedError("3999 127.0.0.1:6381"), 1] if len(sent) == 1 else [1]

    replies, requests = run(calls, answer)

    assert replies == [1, 1]
    assert Switch() in requests
    assert sent == [calls, [calls[0]]]


def test_moved_without_a_cluster_client_goes_again_as_a_cluster_settles() -> None:
    answers = iter([[MovedError("3999 127.0.0.1:6381")], [1]])
    replies, requests = run([cancel("a")], lambda batch: next(answers), switched=False)

    assert replies == [1]
    kinds = [type(r).__name__ for r in requests]
    assert kinds == ["Pipeline", "Switch", "Pause", "Pipeline"]


def test_noscript_loads_each_script_once_then_sends_again_only_those_calls() -> None:
    calls = [cancel("a"), server.ping(), cancel("b")]
    rounds: list[int] = []

    def answer(batch: list[Call[Any]]) -> list[Any]:
        rounds.append(len(batch))
        if len(rounds) == 1:
            return [NoScriptError("NOSCRIPT"), True, NoScriptError("NOSCRIPT")]
        return [1] * len(batch)

    replies, requests = run(calls, answer)

    assert replies == [1, True, 1]
    assert rounds == [3, 2]
    assert [r for r in requests if isinstance(r, Load)] == [Load(executor.script("cancel").source)]


def test_tryagain_goes_again_after_a_pause_until_it_settles() -> None:
    answers = iter([[TryAgainError("TRYAGAIN")], [TryAgainError("TRYAGAIN")], [1]])
    replies, requests = run([cancel("a")], lambda batch: next(answers))

    assert replies == [1]
    assert [r for r in requests if isinstance(r, Pause)] == [Pause(executor.SETTLE_PAUSE_S)] * 2


def broken(batch: list[Call[Any]]) -> list[Any]:
    raise ConnectionError("Connection reset by peer")


def test_a_write_whose_connection_broke_is_not_sent_again() -> None:
    sent: list[int] = []

    def answer(batch: list[Call[Any]]) -> list[Any]:
        sent.append(len(batch))
        return broken(batch)

    with pytest.raises(ConnectionError):
        run([cancel("a")], answer)
    assert sent == [1]


def test_reads_whose_connection_broke_go_again_once_the_slot_map_is_reloaded() -> None:
    answers: list[Any] = []

    def answer(batch: list[Call[Any]]) -> list[Any]:
        answers.append(batch)
        return broken(batch) if len(answers) == 1 else [5]

    replies, requests = run([observe.pending_count(KEYS)], answer)

    assert replies == [5]
    assert requests.count(Reload()) == 1
    assert len(answers) == 2


def test_on_a_cluster_keyless_calls_go_on_their_own() -> None:
    calls = [cancel("a"), server.ping(), cancel("b")]
    sent: list[list[Call[Any]]] = []

    def answer(batch: list[Call[Any]]) -> list[Any]:
        sent.append(batch)
        return [len(sent)] * len(batch)

    replies, _ = run(calls, answer, cluster=True)

    assert sent == [[calls[1]], [calls[0], calls[2]]]
    assert replies == [2, 1, 2]


# --- drive and drive_async: twins -----------------------------------------------------------


def asks(log: list[str]) -> Generator[str, Any, tuple[Any, ...]]:
    """A plan that asks three times, catches a KeyError, and notes when it is closed."""
    try:
        first = yield "one"
        try:
            second = yield "two"
        except KeyError as exc:
            second = f"caught {exc.args[0]}"
        third = yield "three"
        return first, second, third
    finally:
        log.append("closed")


@pytest.mark.parametrize(
    "outcomes",
    [
        {"one": 1, "two": 2, "three": 3},
        {"one": 1, "two": KeyError("k"), "three": 3},
        {"one": 1, "two": 2, "three": ValueError("v")},
        {"one": ConnectionError("down"), "two": 2, "three": 3},
    ],
)
def test_drive_gives_what_drive_async_gives(outcomes: dict[str, Any]) -> None:
    # drive is drive_async's twin for a blocking `do` (docs/architecture.md, "Fast paths"):
    # the same replies, the same error out of the plan, the plan closed either way
    def do(request: str) -> Any:
        if isinstance(outcomes[request], Exception):
            raise outcomes[request]
        return outcomes[request]

    async def do_async(request: str) -> Any:
        return do(request)

    def outcome(run: Callable[[list[str]], Any]) -> tuple[Any, list[str]]:
        log: list[str] = []
        try:
            return run(log), log
        except Exception as exc:
            return repr(exc), log

    sync = outcome(lambda log: drive(asks(log), do))
    in_loop = outcome(lambda log: asyncio.run(drive_async(asks(log), do_async)))

    assert sync == in_loop
    assert sync[1] == ["closed"]
