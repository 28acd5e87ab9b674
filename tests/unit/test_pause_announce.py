"""Pause, resume and the events setting tell workers only once the state is written: the
PUBLISH never shares a batch with the write, because on a cluster the executor sends a
batch's keyless calls first (store.executor.apart), and a worker told before the write reads
the old state and waits for its next poll (issue 43, item 11). Driven through the executor's
own plan with scripted replies, on one server and on a cluster."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from wheelq.admin import events as producer_events
from wheelq.admin import pauses as producer_pauses
from wheelq.core.events import EventsConfig
from wheelq.core.settings import ClientSettings
from wheelq.producer.operations import Producer
from wheelq.store.call import Call
from wheelq.store.executor import Pipeline, drive, plan
from wheelq.store.scripts import Status

TOPIC = "t"
WRITES = {"HSETNX", "HDEL", "HSET", "EVALSHA"}


def answer(call: Call[Any]) -> Any:
    """A server's reply to `call`, enough for the operations driven here."""
    name = str(call.name).upper()
    if name == "TIME":
        return [b"1700000000", b"0"]
    if name == "HSCAN":
        return [b"0", {TOPIC.encode(): b"1700000000000"}]  # paused (as redis-py parses it)
    if name == "EVALSHA":
        return [Status.OK, 0]
    return 1


def sent_in_order(op: Generator[list[Call[Any]], list[Any], Any], cluster: bool) -> list[str]:
    """Run `op` as the executor would (its plan, per batch); each command name as sent, one
    round trip after another."""
    order: list[str] = []

    def do(request: Any) -> Any:
        assert isinstance(request, Pipeline), request
        order.append("+".join(sorted({str(c.name).upper() for c in request.calls})))
        return [answer(c) for c in request.calls]

    try:
        batch = next(op)
        while True:
            raw = drive(plan(batch, lambda: cluster), do)
            batch = op.send([c.parse(r) for c, r in zip(batch, raw, strict=True)])
    except StopIteration:
        return order


def producer() -> Producer:
    p = Producer(ClientSettings())
    p._shards[TOPIC] = 4  # known: no look-up
    return p


def publish_after_write(order: list[str]) -> None:
    publish = [i for i, names in enumerate(order) if "PUBLISH" in names]
    writes = [i for i, names in enumerate(order) if WRITES & set(names.split("+"))]
    assert publish and writes, order
    assert order[publish[0]] == "PUBLISH", order  # a round trip of its own
    assert max(writes) < publish[0], order  # every write answered before it goes


@pytest.mark.parametrize("cluster", [False, True], ids=["single", "cluster"])
def test_a_pause_is_published_only_after_it_is_written(cluster: bool) -> None:
    publish_after_write(sent_in_order(producer_pauses.pause(producer(), TOPIC, None), cluster))


@pytest.mark.parametrize("cluster", [False, True], ids=["single", "cluster"])
def test_a_resume_is_published_only_after_it_is_written(cluster: bool) -> None:
    publish_after_write(sent_in_order(producer_pauses.resume(producer(), TOPIC, None), cluster))


@pytest.mark.parametrize("cluster", [False, True], ids=["single", "cluster"])
def test_an_events_setting_is_published_only_after_it_is_written(cluster: bool) -> None:
    op = producer_events.configure(producer(), TOPIC, EventsConfig(True))
    publish_after_write(sent_in_order(op, cluster))
