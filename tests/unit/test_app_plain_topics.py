"""`App.worker(handlers=, around=)` and `App.scheduler(topics=)`: plain topics run and led
beside an app's tasks (``wheelq run --topic TOPIC=MODULE:HANDLER``), each handler wrapped by
`around`; a plain topic that is a task's topic, or no topic name, is refused naming the
parameter."""

from __future__ import annotations

from typing import Any

import pytest

import wheelq
from wheelq.core.job import Job

APP = wheelq.App("redis://127.0.0.1:1/0")


@APP.task
def send(to: str) -> str:
    return to


def plain(job: Job) -> str:
    return "plain"


async def aplain(job: Job) -> str:
    return "aplain"


def test_the_worker_runs_the_tasks_topics_and_the_plain_ones_each_by_its_handler() -> None:
    worker = APP.worker(handlers={"p1": plain, "p2": wheelq.Route(aplain, timeout_ms=5)})
    assert worker.topics == (send.topic, "p1", "p2")
    by_topic = {lane.topic: lane.runner for lane in worker.lanes}
    assert by_topic["p1"].handler is plain
    assert by_topic["p2"].handler is aplain


def test_a_worker_of_plain_topics_only_needs_no_task() -> None:
    bare = wheelq.App("redis://127.0.0.1:1/0")
    assert bare.worker(handlers={"p1": plain}).topics == ("p1",)
    with pytest.raises(wheelq.InvalidArgumentError) as refused:
        bare.worker()
    assert refused.value.parameter == "tasks"


def test_around_wraps_every_handler_the_tasks_and_the_plain_ones() -> None:
    wrapped: list[Any] = []

    def around(handler: Any) -> Any:
        wrapped.append(handler)
        return handler

    worker = APP.worker(handlers={"p1": plain, "p2": aplain}, around=around)
    assert wrapped[1:] == [plain, aplain] and len(wrapped) == len(worker.lanes) == 3


@pytest.mark.parametrize(("parameter", "make"), [("handlers", "worker"), ("topics", "scheduler")])
def test_a_plain_topic_that_is_a_tasks_topic_is_refused_naming_the_parameter(
    parameter: str, make: str
) -> None:
    given: Any = {send.topic: plain} if make == "worker" else [send.topic]
    with pytest.raises(wheelq.InvalidArgumentError) as refused:
        getattr(APP, make)(**{parameter: given})
    assert refused.value.parameter == parameter
    assert f"{send.topic!r} is task {send.name!r}'s topic" in str(refused.value)


def test_a_plain_topic_that_is_no_topic_name_is_refused_naming_the_parameter() -> None:
    with pytest.raises(wheelq.InvalidArgumentError) as refused:
        APP.worker(handlers={"no spaces!": plain})
    assert refused.value.parameter == "handlers"
    with pytest.raises(wheelq.InvalidArgumentError) as refused:
        APP.scheduler(topics=["no spaces!"])
    assert refused.value.parameter == "topics"


def test_the_scheduler_leads_the_tasks_topics_and_the_plain_ones() -> None:
    node = APP.scheduler(topics=["p1", "p2", "p1"])
    assert node.topics is not None and set(node.topics) == {send.topic, "p1", "p2"}
    assert set(APP.scheduler().topics or ()) == {send.topic}
