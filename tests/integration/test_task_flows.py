"""Tasks that follow tasks (docs/guides/workflows.md): ``f.s(...)`` checks a call's
arguments without enqueuing it; ``a.then(b, delay=...)`` chains calls, each due its delay
after the one before succeeded; ``App.flow`` joins calls, the parent reading its children's
results. With a worker and a scheduler of the app on Redis (one server and a cluster), and
inline in eager mode with no Redis, failures included."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest

import wheelq
from wheelq import App, JobState
from wheelq.errors import InvalidArgumentError, JobFailedError
from wheelq.tasks import Flow

pytestmark = pytest.mark.cluster_too

STARTS: dict[str, list[float]] = {}


def make_app(url: str, topic: str) -> App:
    app = App(url, worker=wheelq.WorkerSettings(retry_base_ms=20, retry_max_ms=20))

    @app.task(name=f"{topic}.double", topic=f"{topic}-double", result_ttl=60)
    def double(n: int) -> int:
        STARTS.setdefault(f"{topic}/{n}", []).append(time.time())
        if n < 0:
            raise ValueError("negative")
        return 2 * n

    @app.task(name=f"{topic}.total", topic=f"{topic}-total")
    async def total(label: str) -> str:
        job = wheelq.current_job()
        STARTS.setdefault(f"{topic}/{label}", []).append(time.time())
        children = await app.aclient.children(job.topic, job.id)
        return f"{label}={sum(c.groups[0].result for c in children)}"

    app.double, app.total = double, total  # type: ignore[attr-defined]
    return app


@pytest.fixture
async def app(redis_url: str, topic: str) -> AsyncIterator[App]:
    app = make_app(redis_url, topic)
    worker, node = app.worker(), app.scheduler()
    await node.start()
    await worker.start()
    try:
        yield app
    finally:
        await worker.stop()
        await node.stop()
        await app.aclose()


async def test_a_chain_runs_each_link_its_delay_after_the_one_before(app: App, topic: str) -> None:
    double = app.double  # type: ignore[attr-defined]
    handle = await double.s(1).then(double.s(2), delay=0.2).then(double.s(3)).aenqueue()
    assert await handle.aresult(timeout=10) == 6
    assert STARTS[f"{topic}/2"][0] - STARTS[f"{topic}/1"][0] >= 0.2
    assert STARTS[f"{topic}/3"][0] >= STARTS[f"{topic}/2"][0]


async def test_a_link_after_a_failure_is_cancelled_or_runs_anyway(app: App, topic: str) -> None:
    double = app.double  # type: ignore[attr-defined]
    cancelled = await double.s(-1).then(double.s(11)).aenqueue()
    anyway = await double.s(-2).then(double.s(12), on_parent_failure="run").aenqueue()
    assert await anyway.aresult(timeout=10) == 24
    with pytest.raises(JobFailedError) as caught:
        await cancelled.aresult(timeout=10)
    assert caught.value.state == JobState.CANCELLED.value
    assert f"{topic}/11" not in STARTS


async def test_a_flows_parent_reads_its_childrens_results(app: App, topic: str) -> None:
    double, total = app.double, app.total  # type: ignore[attr-defined]
    label = f"{topic}-sum"
    handle = await app.aflow(total.s(label), [double.s(n) for n in range(1, 5)])
    assert await handle.aresult(timeout=10) == f"{label}=20"
    last_child = max(STARTS[f"{topic}/{n}"][0] for n in range(1, 5))
    assert STARTS[f"{topic}/{label}"][0] >= last_child


async def test_a_flow_with_a_failed_child_dead_letters_its_parent(app: App, topic: str) -> None:
    double, total = app.double, app.total  # type: ignore[attr-defined]
    handle = await app.aflow(total.s(f"{topic}-never"), [double.s(-3), double.s(3)])
    with pytest.raises(JobFailedError) as caught:
        await handle.aresult(timeout=10)
    assert caught.value.state == JobState.DEAD.value
    assert "negative" in (caught.value.error or "")


def test_a_signature_checks_its_arguments_at_once(redis_url: str, topic: str) -> None:
    app = make_app(redis_url, topic)
    double = app.double  # type: ignore[attr-defined]
    with pytest.raises(InvalidArgumentError) as caught:
        double.s("two")
    assert caught.value.parameter == "n"
    with pytest.raises(InvalidArgumentError) as caught:
        double.s(1).then("not a signature")  # type: ignore[arg-type]
    assert caught.value.parameter == "next_call"
    with pytest.raises(InvalidArgumentError) as caught:
        app.flow(double.s(1), [double.s(2)], on_child_failure="maybe")
    assert caught.value.parameter == "on_child_failure"


def test_eager_mode_runs_chains_and_flows_inline_with_no_redis(topic: str) -> None:
    app = make_app("redis://127.0.0.1:1", topic)  # nothing listens there
    double, total = app.double, app.total  # type: ignore[attr-defined]
    with app.eager():
        assert double.s(1).then(double.s(5), delay=60).enqueue().result(0) == 10
        with pytest.raises(JobFailedError) as caught:
            double.s(-1).then(double.s(6)).enqueue().result(0)
        assert caught.value.state == JobState.CANCELLED.value
        assert double.s(-1).then(double.s(7), on_parent_failure="run").enqueue().result(0) == 14
        with pytest.raises(JobFailedError) as caught:
            app.flow(total.s("x"), [double.s(-1), double.s(2)]).result(0)
        assert caught.value.state == JobState.DEAD.value
        assert app.flow(double.s(9), [double.s(-1)], on_child_failure="ignore").result(0) == 18


async def test_a_flow_inside_a_flow_runs_its_own_children_first(app: App, topic: str) -> None:
    double, total = app.double, app.total  # type: ignore[attr-defined]
    inner = f"{topic}-inner"
    handle = await app.aflow(
        double.s(100), [double.s(1), Flow(total.s(inner), [double.s(2), double.s(3)])]
    )
    assert await handle.aresult(timeout=15) == 200
    assert STARTS[f"{topic}/{inner}"][0] >= max(STARTS[f"{topic}/{n}"][0] for n in (2, 3))
    assert STARTS[f"{topic}/100"][0] >= STARTS[f"{topic}/{inner}"][0]
    assert len(STARTS[f"{topic}/100"]) == 1


def test_eager_mode_runs_a_flow_inside_a_flow_inline(topic: str) -> None:
    app = make_app("redis://127.0.0.1:1", topic)  # nothing listens there
    double = app.double  # type: ignore[attr-defined]
    with app.eager():
        assert app.flow(double.s(4), [Flow(double.s(5), [double.s(6)])]).result(0) == 8
        with pytest.raises(JobFailedError) as caught:
            app.flow(double.s(7), [Flow(double.s(8), [double.s(-1)]), double.s(9)]).result(0)
        assert caught.value.state == JobState.DEAD.value
    assert f"{topic}/7" not in STARTS and f"{topic}/8" not in STARTS and f"{topic}/9" not in STARTS
    with pytest.raises(InvalidArgumentError) as bad:
        Flow(double.s(1), [double.s(2)], on_child_failure="sometimes")
    assert bad.value.parameter == "on_child_failure"
