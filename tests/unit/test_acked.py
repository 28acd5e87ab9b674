"""store.acked.plan with scripted replies (no server): grouping by node, the WAIT after
each node's calls, redirects, NOSCRIPT, and the WAITAOF probe; and producer.durability's
check of what was confirmed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from redis.exceptions import AskError, MovedError, NoScriptError, ResponseError

from wheelq.core.due import DueSpec
from wheelq.core.keys import ShardKeys
from wheelq.core.settings import ClientSettings
from wheelq.errors import AckUnsupportedError, DuplicateJobError, DurabilityError
from wheelq.producer.durability import confirmed
from wheelq.producer.operations import Producer
from wheelq.store import enqueue, topics
from wheelq.store.acked import PLAIN, REFRESH, Acked, Wait, plan
from wheelq.store.call import Call

WAIT = Wait(1, 100)
AOF = Wait(1, 100, aof=True)


def cancel(shard: int, job_id: str) -> Call[bool]:
    return enqueue.cancel(ShardKeys("t", shard), job_id)


def by_shard(key: str) -> str:
    """Shards 0-1 on node a, 2-3 on node b."""
    return "a" if key.startswith(("{t:0}", "{t:1}")) else "b"


Answer = Callable[[str, list[Any]], list[Any]]


def drive(calls: list[Call[Any]], answer: Answer, wait: Wait = WAIT, **kw: Any) -> Any:
    """Run `plan`, answering each node's pipeline with `answer(node, commands)`; returns
    (replies, short, requests)."""
    requests: list[Any] = []
    steps = plan(calls, wait, kw.get("route", by_shard), kw.get("probed", set()))
    try:
        request = next(steps)
        while True:
            requests.append(request)
            if request is REFRESH:
                request = steps.send(kw.get("refresh", True))
            else:
                request = steps.send([answer(n, [c for c, _ in cmds]) for n, cmds in request])
    except StopIteration as done:
        return (*done.value, requests)


def test_each_node_gets_its_calls_then_the_wait_and_its_count_marks_them() -> None:
    calls = [cancel(0, "x"), cancel(2, "y"), cancel(1, "z")]
    replies, short, requests = drive(calls, lambda n, c: [1] * (len(c) - 1) + [n == "a"])
    assert [(n, [c[0] for c, _ in cmds]) for n, cmds in requests[0]] == [
        ("a", ["EVALSHA", "EVALSHA", "WAIT"]),
        ("b", ["EVALSHA", "WAIT"]),
    ]
    assert replies == [1, 1, 1]
    assert short == {1: 0}  # only node b fell short


def test_moved_refreshes_and_sends_again_to_the_new_owner_with_its_wait() -> None:
    owner = {"now": "a"}

    def answer(node: str, commands: list[Any]) -> list[Any]:
        if node == "a":
            owner["now"] = "b"  # what the refresh will find
            return [MovedError("3999 127.0.0.1:7001"), 1]  # the call did not run there
        return [True, 1]

    replies, short, requests = drive([cancel(0, "x")], answer, route=lambda k: owner["now"])
    assert requests[1] is REFRESH
    assert [n for n, _ in requests[2]] == ["b"]
    assert (replies, short) == ([True], {})


def test_a_moved_call_that_cannot_go_again_keeps_its_error() -> None:
    moved = MovedError("3999 127.0.0.1:7001")
    replies, _, requests = drive(
        [cancel(0, "x")], lambda n, c: [moved, 1], route=lambda k: PLAIN, refresh=False
    )
    assert replies == [moved] and requests[-1] is REFRESH


def test_ask_goes_to_the_named_node_after_asking_without_a_refresh() -> None:
    ask = AskError("3999 127.0.0.1:7002")

    def answer(node: str, commands: list[Any]) -> list[Any]:
        if node == "a":
            return [ask, 1]
        assert [c[0] for c in commands] == ["ASKING", "EVALSHA", "WAIT"]
        return ["OK", True, 1]

    replies, short, requests = drive([cancel(0, "x")], answer)
    assert [n for n, _ in requests[1]] == ["127.0.0.1:7002"]
    assert REFRESH not in requests
    assert (replies, short) == ([True], {})


def test_noscript_loads_the_script_first_on_that_node() -> None:
    def answer(node: str, commands: list[Any]) -> list[Any]:
        if commands[0][0] == "SCRIPT":
            return ["sha", 1, 1]
        return [NoScriptError("NOSCRIPT"), 1]

    replies, _, requests = drive([cancel(0, "x")], answer)
    first, _options = requests[1][0][1][0]
    assert first[:2] == ("SCRIPT", "LOAD")
    assert replies == [1]


def test_waitaof_probes_each_node_once_and_refuses_before_writing() -> None:
    info = {"aof_enabled": 1}
    probed: set[str] = set()

    def answer(node: str, commands: list[Any]) -> list[Any]:
        if commands[0][0] == "WAITAOF":  # the probe
            return [[0, 0], info]
        return [1, [1, 1]]

    _, short, requests = drive([cancel(0, "x")], answer, AOF, probed=probed)
    assert [c[0] for c, _ in requests[0][0][1]] == ["WAITAOF", "INFO"]
    assert probed == {"a"} and short == {}
    _, _, again = drive([cancel(1, "x")], answer, AOF, probed=probed)
    assert len(again) == 1  # no probe the second time

    for lacking, reason in (
        ([ResponseError("unknown command 'WAITAOF'"), info], "has no WAITAOF"),
        ([[0, 0], {"aof_enabled": 0}], "has appendonly no"),
    ):
        sent: list[Any] = []

        def answer(
            node: str, commands: list[Any], lacking: Any = lacking, sent: list[Any] = sent
        ) -> list[Any]:
            sent.append(commands)
            return lacking

        with pytest.raises(AckUnsupportedError, match=reason):
            drive([cancel(2, "x")], answer, AOF)
        assert len(sent) == 1  # the probe only: nothing written


@pytest.mark.parametrize(
    ("wait", "reply", "count"),
    [(WAIT, 2, 2), (WAIT, ResponseError("x"), -1), (AOF, [1, 1], 1), (AOF, [0, 1], -1)],
)
def test_wait_reads_its_reply(wait: Wait, reply: Any, count: int) -> None:
    assert wait.confirmed(reply) == count


def _enqueue(ids: list[str]) -> Call[Any]:
    writes = [enqueue.JobWrite(i, DueSpec("delay", 1000), False, b"") for i in ids]
    return enqueue.enqueue(ShardKeys("t", 0), writes)


def test_confirmed_names_the_jobs_of_the_calls_that_fell_short() -> None:
    def op() -> Any:
        replies = yield [_enqueue(["a", "b"]), _enqueue(["c"]), cancel(1, "d")]
        return replies

    wrapped = confirmed(Producer(ClientSettings()), "t", op(), "replicated", WAIT)
    assert next(wrapped)
    with pytest.raises(DurabilityError) as info:
        wrapped.send(Acked([1, 2, 3], {0: 0, 2: 0}))
    assert (info.value.job_ids, info.value.result, info.value.confirmed) == (
        ["a", "b", "d"],
        [1, 2, 3],
        0,
    )


def test_a_short_call_naming_no_job_puts_every_job_in_doubt_and_forgets_the_topic() -> None:
    producer = Producer(ClientSettings())
    producer._shards["t"] = 4

    def op() -> Any:
        yield [topics.register_topic("t", 4)]
        yield [_enqueue(["a"]), _enqueue(["b"])]
        raise DuplicateJobError("t", ["b"], ["a"])

    wrapped = confirmed(producer, "t", op(), "replicated", WAIT)
    next(wrapped)
    wrapped.send(Acked([True], {0: 0}))
    with pytest.raises(DurabilityError) as info:
        wrapped.send(Acked([[0], [2]], {}))
    assert info.value.job_ids == ["a"]  # "b" was a duplicate: not written
    assert isinstance(info.value.__cause__, DuplicateJobError)
    assert "t" not in producer._shards
