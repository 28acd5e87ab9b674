"""worker.slots without Redis: the smooth weighted round robin (`Turns`) spreads each lane's
turns by its weight, gives an idle lane's share to the others, and keeps the turn of a lane
whose entries are on their way; the handler threads' `TurnQueue` takes runs in the same
turns (or strict priority), so a sync handler's queued runs start by weight."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter

from tests.support.waiting import until
from wheelq import Job
from wheelq.worker.handler_runner import HandlerRunner, handler_threads
from wheelq.worker.slots import TurnQueue, Turns


def test_turns_spread_each_lane_by_its_weight() -> None:
    turns = Turns([6, 3, 1])
    picks = [turns.pick([True] * 3) for _ in range(10)]
    assert picks == [0, 1, 0, 0, 1, 0, 2, 0, 1, 0]  # every 10 turns: 6, 3 and 1, spread
    assert Counter(turns.pick([True] * 3) for _ in range(1000)) == {0: 600, 1: 300, 2: 100}


def test_a_lane_with_nothing_waiting_leaves_its_share_to_the_others() -> None:
    turns = Turns([6, 3, 1])
    picks = Counter(turns.pick([False, True, True]) for _ in range(400))
    assert picks == {1: 300, 2: 100}
    assert turns.pick([False] * 3) == -1


def test_a_lane_whose_entries_are_on_their_way_keeps_its_turn() -> None:
    turns = Turns([1, 1])
    assert turns.pick([True, True]) == 0  # lane 1's turn next
    for _ in range(3):  # its entries are on their way: nobody starts, the turn stays its own
        assert turns.pick([True, False], coming=[False, True]) == -1
    assert turns.pick([True, True]) == 1  # they came
    assert turns.pick([True, False], coming=[False, False]) == 0  # drained: no turn held


def test_the_turn_queue_hands_out_by_weight_or_strictly() -> None:
    weighted: TurnQueue[str] = TurnQueue([3, 1])
    strict: TurnQueue[str] = TurnQueue([3, 1], strict=True)
    for q in (weighted, strict):
        for n in range(40):
            q.put(f"b{n}", 1)  # the low lane's runs were queued first
        for n in range(40):
            q.put(f"a{n}", 0)
    assert Counter(str(weighted.get())[0] for _ in range(40)) == {"a": 30, "b": 10}
    assert [str(strict.get())[0] for _ in range(41)] == ["a"] * 40 + ["b"]
    one: TurnQueue[int] = TurnQueue()
    one.put(1)
    one.wake()
    assert (one.get(), one.get(), one.empty()) == (1, None, True)


def job(topic: str, n: int) -> Job:
    return Job(id=f"{topic}{n}", topic=topic, payload=n, due_ms=0, attempt=1, max_attempts=1)


async def test_sync_handlers_of_several_topics_share_the_threads_and_start_by_weight() -> None:
    """Issue 43 item 1: each topic's def handler had threads of its own, fed in arrival order;
    runs queued on the shared threads start by weight, whichever topic queued first."""
    started: list[str] = []
    gate = threading.Event()

    def handler(j: Job) -> None:
        started.append(j.topic)
        gate.wait(timeout=10)  # the first run holds the only thread while the others queue

    pool = handler_threads(1, 0, [6, 3, 1])
    runners = {
        topic: HandlerRunner(handler, timeout_ms=0, threads=1, pool=pool, lane=n)
        for n, topic in enumerate("cdl")
    }
    try:
        first = runners["l"].submit(job("l", 0))
        await until(lambda: started == ["l"], what="the first run holding the thread")
        runs = [runners[t].submit(job(t, n)) for t in "ldc" for n in range(1, 61)]  # l first
        gate.set()
        await asyncio.gather(first, *runs)
    finally:
        pool.close()
    assert Counter(started[1:101]) == {"c": 60, "d": 30, "l": 10}
