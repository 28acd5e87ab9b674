"""wheelq.tasks: a task's typed codec (arguments checked at enqueue, read back in the
worker, results typed) and `App.task`'s checks of its options (no Redis: nothing here
connects)."""

from __future__ import annotations

import datetime
import decimal
import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import wheelq
from tests.support import task_types
from wheelq.core.job import Job
from wheelq.core.payload import decode_payload, encode_payload
from wheelq.core.retry import Fail
from wheelq.tasks.codec import TaskCodec

URL = "redis://127.0.0.1:1"  # never connected to: an App connects on first use


Tier, Address, Order = task_types.Tier, task_types.Address, task_types.Order


def bill(order: Order, address: Address, tier: Tier = Tier.FREE, note: str | None = None) -> Order:
    return order


def send(to: str, n: int, *, cc: list[str] | None = None) -> dict[str, Any]:
    return {"to": to, "n": n}


ORDER = Order(
    uuid.UUID(int=7), decimal.Decimal("12.30"), datetime.datetime(2026, 1, 2, tzinfo=datetime.UTC)
)

WRONG = [
    (send, ("a@b",), {"n": "two"}, "n"),
    (send, ("a@b", 2.5), {}, "n"),
    (send, ("a@b", True), {}, "n"),
    (send, (7, 2), {}, "to"),
    (send, ("a@b",), {}, "n"),  # missing
    (send, ("a@b", 2), {"cc": "x@y"}, "cc"),
    (send, ("a@b", 2), {"cc": ["x@y", 3]}, "cc"),
    (send, ("a@b", 2), {"bcc": []}, "bcc"),  # unknown
    (bill, ({"id": "not a uuid"}, Address("Oslo")), {}, "order"),
    (bill, (ORDER, {"town": "Oslo"}), {}, "address"),
    (bill, (ORDER, Address("Oslo")), {"tier": "gold"}, "tier"),
]
"""(function, args, kwargs, the parameter the error must name)."""


@pytest.mark.parametrize(("fn", "args", "kwargs", "parameter"), WRONG)
def test_a_wrong_argument_is_refused_naming_its_parameter(
    fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any], parameter: str
) -> None:
    codec = TaskCodec(fn, fn.__name__)
    with pytest.raises(wheelq.InvalidArgumentError) as raised:
        codec.encode(args, kwargs)
    assert raised.value.parameter == parameter, raised.value
    assert parameter in str(raised.value), raised.value


def test_the_payload_is_a_map_of_plain_values_without_the_defaults() -> None:
    """The documented shape: parameter -> plain value (what JSON carries); a parameter left
    to its default is left out, so the worker's default applies."""
    codec = TaskCodec(bill, "bill")
    payload = codec.encode((ORDER, Address("Oslo")), {"tier": Tier.PRO})
    assert payload == {
        "order": {"id": str(ORDER.id), "total": "12.30", "placed": "2026-01-02T00:00:00Z"},
        "address": {"city": "Oslo", "zip": ""},
        "tier": "pro",
    }
    assert decode_payload(encode_payload(payload, 1 << 20)) == payload  # msgpack as it is


def test_a_payload_reads_back_into_the_annotated_types_defaults_filled() -> None:
    codec = TaskCodec(bill, "bill")
    payload = codec.encode((ORDER, Address("Oslo")), {})
    assert codec.decode(payload) == {
        "order": ORDER,
        "address": Address("Oslo"),
        "tier": Tier.FREE,
        "note": None,
    }


def test_a_payload_from_json_reads_leniently_where_json_is_poor() -> None:
    """Another language enqueues over HTTP: a UUID, a Decimal and a time as text."""
    codec = TaskCodec(bill, "bill")
    got = codec.decode(
        {
            "order": {
                "id": str(uuid.UUID(int=7)),
                "total": "12.30",
                "placed": "2026-01-02T00:00:00+00:00",
            },
            "address": {"city": "Oslo"},
        }
    )
    assert got["order"] == ORDER


@pytest.mark.parametrize(
    "payload", [["a@b", 2], "a@b", None, {"to": "a@b", "n": "two"}, {"to": "a@b"}, {"x": 1}]
)
def test_a_payload_that_does_not_fit_is_refused(payload: Any) -> None:
    with pytest.raises(wheelq.InvalidArgumentError):
        TaskCodec(send, "send").decode(payload)


@given(
    to=st.text(max_size=20),
    n=st.integers(min_value=-(2**63), max_value=2**63 - 1),
    cc=st.none() | st.lists(st.text(max_size=5), max_size=3),
)
def test_any_fitting_call_round_trips_through_msgpack(
    to: str, n: int, cc: list[str] | None
) -> None:
    codec = TaskCodec(send, "send")
    wire = decode_payload(encode_payload(codec.encode((to, n), {"cc": cc}), 1 << 20))
    assert codec.decode(wire) == {"to": to, "n": n, "cc": cc}


def test_results_come_back_as_the_return_annotation_says() -> None:
    codec = TaskCodec(bill, "bill")
    plain = codec.encode_result(ORDER)
    assert plain == {"id": str(ORDER.id), "total": "12.30", "placed": "2026-01-02T00:00:00Z"}
    assert codec.decode_result(plain) == ORDER
    assert TaskCodec(send, "send").decode_result({"to": "x"}) == {"to": "x"}


def no_hints(a, b=1):  # type: ignore[no-untyped-def]
    return a


def test_an_unannotated_function_takes_anything_msgpack_carries() -> None:
    codec = TaskCodec(no_hints, "no_hints")
    assert codec.decode(codec.encode(([1, {"x": b"y"}],), {})) == {"a": [1, {"x": b"y"}], "b": 1}


def star_args(*names: str) -> None: ...
def star_kwargs(**options: int) -> None: ...
def positional_only(a: int, /) -> None: ...
def unresolved(a: NoSuchType) -> None: ...  # type: ignore[name-defined]  # noqa: F821


@pytest.mark.parametrize("fn", [star_args, star_kwargs, positional_only, unresolved])
def test_a_function_a_payload_cannot_name_every_argument_of_is_refused(fn: Any) -> None:
    app = wheelq.App(URL)
    with pytest.raises(wheelq.InvalidArgumentError) as raised:
        app.task(fn)
    assert raised.value.parameter == "fn", raised.value
    assert app.tasks == {}


BAD_OPTIONS = [
    ({"max_attempts": 0}, "max_attempts"),
    ({"max_attempts": 1001}, "max_attempts"),
    ({"timeout": -1}, "timeout"),
    ({"timeout": float("nan")}, "timeout"),
    ({"timeout": "5"}, "timeout"),
    ({"retry": {"base_ms": 5}}, "retry"),
    ({"result": "yes"}, "result"),
    ({"topic": "no spaces"}, "topic"),
    ({"topic": "x" * 101}, "topic"),
]


@pytest.mark.parametrize(("options", "parameter"), BAD_OPTIONS)
def test_a_bad_task_option_is_refused_naming_it(options: dict[str, Any], parameter: str) -> None:
    app = wheelq.App(URL)
    with pytest.raises(wheelq.InvalidArgumentError) as raised:
        app.task(**options)(send)
    assert raised.value.parameter == parameter, raised.value
    assert app.tasks == {}


def test_a_tasks_name_and_topic_follow_from_its_function_and_are_its_own() -> None:
    app = wheelq.App(URL)
    task = app.task(send)
    assert task.name == f"{__name__}.send" and task.topic == task.name
    assert app.tasks == {task.name: task}
    with pytest.raises(wheelq.InvalidArgumentError) as again:
        app.task(send)
    assert again.value.parameter == "name"
    with pytest.raises(wheelq.InvalidArgumentError) as shared:
        app.task(topic=task.topic, name="other")(bill)
    assert shared.value.parameter == "topic"
    named = app.task(name="billing", topic="billing-v2")(bill)
    assert (named.name, named.topic) == ("billing", "billing-v2")
    assert app.chosen(["billing-v2"]) == [named] and app.chosen(["billing"]) == [named]
    with pytest.raises(wheelq.InvalidArgumentError):
        app.chosen(["nope"])


def test_calling_a_task_runs_its_function_here() -> None:
    task = wheelq.App(URL).task(send)
    assert task("a@b", 2) == {"to": "a@b", "n": 2}
    assert task.__doc__ == send.__doc__ and task.__wrapped__ is send


def job(payload: Any, attempt: int = 1) -> Job:
    return Job(id="j", topic="t", payload=payload, due_ms=0, attempt=attempt, max_attempts=3)


def test_the_worker_handler_runs_the_function_and_keeps_its_result_plain() -> None:
    app = wheelq.App(URL)
    handler = app.task(bill).handler()
    payload = TaskCodec(bill, "bill").encode((ORDER, Address("Oslo")), {})
    assert handler(job(payload)) == {
        "id": str(ORDER.id),
        "total": "12.30",
        "placed": "2026-01-02T00:00:00Z",
    }
    with pytest.raises(Fail, match="'order'"):  # dead-lettered at once: no retry can fix it
        handler(job({"address": {"city": "Oslo"}}))
    assert wheelq.App(URL).task(result=False)(bill).handler()(job(payload)) is None


async def test_the_worker_handler_of_an_async_task_is_async() -> None:
    async def ping(n: int) -> int:
        return n + 1

    handler = wheelq.App(URL).task(ping).handler()
    assert await handler(job({"n": 1})) == 2
