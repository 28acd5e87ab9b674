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
from wheelq.core.retry import Fail, RetryPolicy, after_failure
from wheelq.tasks.codec import TaskCodec

URL = "redis://127.0.0.1:1"  # never connected to: an App connects on first use


Tier, Address, Order = task_types.Tier, task_types.Address, task_types.Order
Parcel, Item = task_types.Parcel, task_types.Item


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


def ship(address: Address, parcel: Parcel, items: list[Item], order: Order | None = None) -> int:
    return len(items)


SHIP = (Address("Oslo"), Parcel(1200), [Item("a-1", 2)])

WRONG_FIELDS = [
    ({"address": Address(5)}, "address", "at address.city"),  # type: ignore[arg-type]
    ({"parcel": Parcel("heavy")}, "parcel", "at parcel[0]"),  # type: ignore[arg-type]
    ({"parcel": Parcel(1200, fragile="yes")}, "parcel", "at parcel[1]"),  # type: ignore[arg-type]
    ({"items": [Item("a-1", 2), Item("b-2", "two")]}, "items", "at items[1].quantity"),  # type: ignore[arg-type]
    ({"items": [Item(3, 2)]}, "items", "at items[0].sku"),  # type: ignore[arg-type]
    ({"order": Order("no uuid", ORDER.total, ORDER.placed)}, "order", "at order.id"),  # type: ignore[arg-type]
    ({"order": Order(ORDER.id, 12.3, "2026-13-45")}, "order", "at order.placed"),  # type: ignore[arg-type]
]
"""(the arguments over `SHIP`'s, the parameter named, where in it): a model built with a
field of the wrong type (neither a dataclass, a named tuple nor a Struct checks its fields
when built), at any depth."""


@pytest.mark.parametrize(("given", "parameter", "where"), WRONG_FIELDS)
def test_a_model_argument_with_a_wrong_field_is_refused_naming_parameter_and_field(
    given: dict[str, Any], parameter: str, where: str
) -> None:
    codec = TaskCodec(ship, "tasks.ship")
    arguments = dict(zip(("address", "parcel", "items"), SHIP, strict=True)) | given
    with pytest.raises(wheelq.InvalidArgumentError) as raised:
        codec.encode((), arguments)
    assert raised.value.parameter == parameter, raised.value
    text = str(raised.value)
    assert text.startswith(f"tasks.ship: argument {parameter!r}: ") and where in text, text


def test_model_arguments_of_the_right_types_go_as_maps_and_come_back_as_models() -> None:
    codec = TaskCodec(ship, "tasks.ship")
    payload = codec.encode(SHIP, {"order": ORDER})
    assert list(payload["parcel"]) == [1200, False]  # a named tuple goes as an array
    assert payload["items"] == [{"sku": "a-1", "quantity": 2}]
    assert codec.decode(decode_payload(encode_payload(payload, 1 << 20))) == {
        "address": SHIP[0],
        "parcel": SHIP[1],
        "items": SHIP[2],
        "order": ORDER,
    }


def anything(a, b: Any = None):  # type: ignore[no-untyped-def]
    return a


@pytest.mark.parametrize(
    ("args", "parameter"),
    [((object(),), "a"), ((1, {"x": object()}), "b"), (({1, 2j},), "a")],
)
def test_an_argument_a_payload_cannot_carry_is_a_payload_type_error_naming_it(
    args: tuple[Any, ...], parameter: str
) -> None:
    """An unannotated (or ``Any``) parameter takes anything msgpack carries, unchecked; an
    object of no type a payload can carry is refused with the task and parameter named."""
    with pytest.raises(wheelq.PayloadTypeError) as raised:
        TaskCodec(anything, "tasks.anything").encode(args, {})
    assert isinstance(raised.value, TypeError)
    assert str(raised.value).startswith(f"tasks.anything: argument {parameter!r} "), raised.value


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
    "payload",
    [
        ["a@b", 2],
        "a@b",
        None,
        {"to": "a@b", "n": "two"},
        {"to": "a@b", "n": "2"},  # the worker reads by enqueue's rule: strict
        {"to": "a@b", "n": "5", "cc": None},
        {"to": "a@b", "n": True},
        {"to": "a@b", "n": 2, "cc": "x@y"},
        {"to": 7, "n": 2},
        {"to": "a@b"},
        {"x": 1},
    ],
)
def test_a_payload_that_does_not_fit_is_refused(payload: Any) -> None:
    with pytest.raises(wheelq.InvalidArgumentError):
        TaskCodec(send, "send").decode(payload)


def flags(on: bool, ratio: float, when: datetime.date) -> None: ...


@pytest.mark.parametrize(
    ("payload", "parameter"),
    [
        ({"on": "true", "ratio": 0.5, "when": "2026-01-02"}, "on"),
        ({"on": 1, "ratio": 0.5, "when": "2026-01-02"}, "on"),
        ({"on": True, "ratio": "0.5", "when": "2026-01-02"}, "ratio"),
        ({"on": True, "ratio": 0.5, "when": 20260102}, "when"),
    ],
)
def test_the_worker_reads_no_text_for_a_number_or_a_bool(
    payload: dict[str, Any], parameter: str
) -> None:
    codec = TaskCodec(flags, "flags")
    with pytest.raises(wheelq.InvalidArgumentError) as decoded:
        codec.decode(payload)
    assert decoded.value.parameter == parameter
    with pytest.raises(wheelq.InvalidArgumentError) as encoded:
        codec.encode((), payload)
    assert encoded.value.parameter == parameter


NUMBERS_AS_TEXT = st.sampled_from(["2", "-5", "1.5", "true", "false", "null"])
"""What a lax reader takes for a number, a bool or None."""

PLAIN = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8) | NUMBERS_AS_TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=5,
)


@given(
    to=st.text(max_size=5) | PLAIN,
    n=st.integers() | NUMBERS_AS_TEXT | PLAIN,
    cc=st.none() | st.lists(st.text(max_size=3) | NUMBERS_AS_TEXT, max_size=2) | PLAIN,
)
def test_enqueue_and_the_worker_take_the_same_payloads(to: Any, n: Any, cc: Any) -> None:
    """One rule on both sides: whatever a plain value, the worker reads it as an argument
    exactly when enqueue takes it, and as the same value."""
    codec = TaskCodec(send, "send")

    def attempt(call: Any) -> Any:
        try:
            return call()
        except wheelq.InvalidArgumentError:
            return "refused"

    encoded = attempt(lambda: codec.encode((to, n), {"cc": cc}))
    decoded = attempt(lambda: codec.decode({"to": to, "n": n, "cc": cc}))
    assert (encoded == "refused") == (decoded == "refused"), (encoded, decoded)
    if encoded != "refused":
        assert codec.decode(encoded) == decoded


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


def count(n: int) -> int:
    return n


def note(n: int) -> None:
    print(n)


@pytest.mark.parametrize(
    ("fn", "value", "says"),
    [
        (send, object(), "cannot be kept as a result"),
        (send, {"to": {1, 2j}}, "cannot be kept as a result"),
        (count, "three", "does not fit its return annotation int"),
        (count, None, "does not fit its return annotation int"),
        (count, "3", "does not fit its return annotation int"),
        (bill, {"id": "no uuid"}, "does not fit its return annotation Order"),
        (bill, Order("no uuid", ORDER.total, ORDER.placed), "$.id"),  # type: ignore[arg-type]
        (ship, [3], "does not fit its return annotation int"),
        (note, 5, "does not fit its return annotation None"),
        (note, {1, 2}, "does not fit its return annotation None"),
    ],
)
def test_a_result_that_cannot_be_kept_or_read_back_fails_the_run_for_good(
    fn: Any, value: Any, says: str
) -> None:
    """Where the function ran: a ResultTypeError naming the task, which the worker never
    retries (running the function again would come to the same value)."""
    codec = TaskCodec(fn, f"tasks.{fn.__name__}")
    with pytest.raises(wheelq.ResultTypeError) as raised:
        codec.encode_result(value)
    assert str(raised.value).startswith(f"tasks.{fn.__name__}: its return value "), raised.value
    assert says in str(raised.value), raised.value
    outcome = after_failure(1, 5, raised.value, RetryPolicy(), 0.5)
    assert outcome.dead and "attempt 1 of 5, not retried: ResultTypeError: " in outcome.error


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


def test_the_worker_handler_fails_a_result_it_cannot_keep_and_one_kept_by_nobody_is_free() -> None:
    def wrong(n: int) -> int:
        return "three"  # type: ignore[return-value]

    app = wheelq.App(URL)
    with pytest.raises(wheelq.ResultTypeError, match="does not fit its return annotation int"):
        app.task(wrong).handler()(job({"n": 1}))
    kept_by_nobody = app.task(result=False, name="unkept")(wrong).handler()
    assert kept_by_nobody(job({"n": 1})) is None


def test_a_tasks_own_max_attempts_goes_to_its_worker_and_a_call_cannot_say_otherwise() -> None:
    """The task's max_attempts is its worker's (`Route.max_attempts`: every job of its topic,
    however written); one call asking for another is refused, not silently overruled."""
    app = wheelq.App(URL)
    own = app.task(max_attempts=3, retry=RetryPolicy(base_ms=20))(send)
    route = own.route()
    assert (route.max_attempts, route.retry) == (3, RetryPolicy(base_ms=20))
    with pytest.raises(wheelq.InvalidArgumentError) as refused:
        own.options(max_attempts=7)
    assert refused.value.parameter == "max_attempts" and "max_attempts=3" in str(refused.value)
    own.options(max_attempts=3)  # the same: fine
    free = app.task(name="free")(bill)
    assert free.route().max_attempts is None
    free.options(max_attempts=7)  # its jobs keep their own


async def test_the_worker_handler_of_an_async_task_is_async() -> None:
    async def ping(n: int) -> int:
        return n + 1

    handler = wheelq.App(URL).task(ping).handler()
    assert await handler(job({"n": 1})) == 2
