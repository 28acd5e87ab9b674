"""core.options: the one table of a job's options, and every face and wire shape held to it."""

from __future__ import annotations

import dataclasses
import inspect
import warnings
from datetime import UTC, datetime
from typing import Any, get_type_hints

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from wheelq import Admin, AsyncAdmin
from wheelq.cli import build_parser
from wheelq.core import options as opts
from wheelq.core.callback import Callback
from wheelq.core.job import READY_ENTRY, Envelope, Job
from wheelq.core.options import (
    OPTIONS,
    RUN,
    STORED,
    EnqueueItem,
    EnqueueKwargs,
    ItemOptions,
    TaskCallOptions,
)
from wheelq.core.retry import retry_envelope
from wheelq.core.settings import ClientSettings
from wheelq.errors import InvalidArgumentError
from wheelq.outbox.enqueue import enqueue as outbox_enqueue
from wheelq.outbox.rows import refusal
from wheelq.producer.client import Client
from wheelq.producer.items import EncodeBatch, validate_item
from wheelq.producer.replay import HeldJob
from wheelq.tasks.task import Task
from wheelq.web.models.enqueue import JobIn
from wheelq.web.models.schedules import ScheduleIn, ScheduleOut

# A value of each stored kind other than its unset one, as a caller gives it
GIVEN: dict[str, Any] = {
    "text": "k-1",
    "trace": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    "callback": "https://example.com/hook",
    "flag": True,
    "int": 3,
    "time": datetime(2030, 1, 1, tzinfo=UTC),
    "priority": 9,
}
AS_JOB: dict[str, Any] = {  # what a `Job` (and `get()`) holds of a kind's GIVEN value, when not it
    "callback": Callback(GIVEN["callback"]),
    "time": 1_893_456_000_000,
}
SHOWN = {**AS_JOB, "callback": GIVEN["callback"]}


def test_the_typed_spellings_name_exactly_the_tables_options() -> None:
    names = [o.name for o in OPTIONS]
    assert list(EnqueueItem._fields) == ["payload", *names]
    assert set(get_type_hints(ItemOptions)) == set(names)
    assert set(get_type_hints(EnqueueKwargs)) == {
        *names,
        "ack",
        "debounce",
        "max_wait",
        "debounce_ms",
        "max_wait_ms",
        "after",
        "on_parent_failure",
    }
    shared = {o.name for o in OPTIONS if o.shared}
    assert set(get_type_hints(opts.BulkOptions)) == {"delay", "at", "ack", *shared}
    assert set(get_type_hints(opts.SharedOptions)) == shared
    assert set(get_type_hints(TaskCallOptions)) == set(names) - {"delay", "at"} | {"ack"}
    runs = {"max_attempts", *(o.name for o in RUN)}
    assert set(get_type_hints(opts.RunOptions)) == runs == set(opts.RUN_NAMES)
    # a trace is one call's; an expiry one job's (a schedule's runs are due at their times)
    assert {o.name for o in STORED} - runs == {"traceparent", "expires"}


@given(st.dictionaries(st.sampled_from(EnqueueItem._fields[1:]), st.integers() | st.none()))
def test_an_item_built_with_keywords_is_the_named_tuple_of_those_fields(
    fields: dict[str, Any],
) -> None:
    """`EnqueueItem`'s constructor (written from its fields at import) against the named
    tuple's own: the same fields, each default where not given; keywords only."""
    item = EnqueueItem(payload=b"p", **fields)
    assert type(item) is EnqueueItem
    assert tuple(item) == tuple(opts._Fields(b"p", **fields))
    parameters = inspect.signature(EnqueueItem).parameters
    assert list(parameters) == list(EnqueueItem._fields)
    assert {p.kind for p in parameters.values()} == {inspect.Parameter.KEYWORD_ONLY}
    with pytest.raises(TypeError, match=r"EnqueueItem.__new__\(\) got an unexpected keyword"):
        EnqueueItem(payload=1, **{"colour": "red"})


def test_the_envelope_and_the_job_have_an_attribute_for_each_stored_option() -> None:
    envelope = [f.name for f in dataclasses.fields(Envelope)]
    assert envelope[6:] == [o.name for o in STORED]  # the option slots, in order
    job = {f.name for f in dataclasses.fields(Job)}
    assert {o.name for o in STORED} <= job
    entry = {f.source: f for f in READY_ENTRY if f.optional}
    for o in STORED:
        assert entry[o.name].name == o.entry and entry[o.name].kind == o.kind


def item_with(o: opts.Option) -> EnqueueItem:
    values: dict[str, Any] = {o.name: GIVEN[o.kind or ""]}
    if o.requires:
        required = opts.BY_NAME[o.requires]
        values[o.requires] = GIVEN[required.kind or ""]
    return EnqueueItem(payload=1, **values)


@pytest.mark.parametrize("option", STORED, ids=lambda o: o.name)
def test_each_stored_option_reaches_the_envelope_the_entry_a_retry_and_get(
    option: opts.Option,
) -> None:
    write = validate_item(ClientSettings(), item_with(option), EncodeBatch(1_000))
    envelope = Envelope.unpack(write.envelope)
    stored = getattr(envelope, option.name)
    assert stored != opts.KINDS[option.kind or ""].unset
    # the entry field holds the slot's bytes, as wq_fire_entry copies them
    slot = opts.KINDS[option.kind or ""].slot(stored)
    raw = slot.encode() if isinstance(slot, str) else slot
    fields = {b"id": b"j", b"topic": b"t", b"due": b"1", b"attempt": b"1", b"payload": b"\x01"}
    fields[option.entry or b""] = raw
    job = Job.from_entry("1-0", fields)
    value = getattr(job, option.name)
    assert value == AS_JOB.get(option.kind or "", GIVEN[option.kind or ""])
    again = Envelope.unpack(retry_envelope(job, b"p", 1, "g"))
    assert getattr(again, option.name) == stored
    from wheelq.core.history import entry_options

    shown = entry_options(fields)[option.name]
    assert shown == SHOWN.get(option.kind or "", GIVEN[option.kind or ""])


def test_a_bad_value_of_a_stored_option_is_refused_naming_it() -> None:
    for o in STORED:
        with pytest.raises(InvalidArgumentError) as caught:
            validate_item(
                ClientSettings(), EnqueueItem(payload=1, **{o.name: object()}), EncodeBatch(0)
            )  # type: ignore[misc]
        assert caught.value.parameter == o.name


def test_the_http_body_takes_each_option_the_table_gives_a_json_field() -> None:
    fields = set(JobIn.model_fields)
    for o in OPTIONS:
        if o.http is not None:
            assert o.name in fields, o.name


def test_the_http_schedule_models_take_and_show_each_option_of_the_runs() -> None:
    """ScheduleIn: exactly JobIn's fields of the options a run carries; ScheduleOut: each
    of them, as `get()` shows it, and max_attempts."""
    job_fields = {o.name for o in OPTIONS if o.name in JobIn.model_fields}
    runs = {"max_attempts", *(o.name for o in RUN)}
    rule = {"payload", "cron", "every_ms", "tz", "start", "end", "misfire", "max_catch_up"}
    assert set(ScheduleIn.model_fields) == rule | (job_fields & runs)
    state = {"name", "topic", "start_ms", "end_ms", "paused", "planned_ms", "updated_ms"}
    shown = set(ScheduleOut.model_fields) - state - rule - {"next_run_ms", "error", "declared"}
    assert shown == runs
    for o in RUN:
        assert ScheduleOut.model_fields[o.name].description == o.doc


def _flags(*command: str) -> set[str]:
    """The option strings of one (sub)command of ``wheelq``."""
    parser: Any = build_parser()
    for name in command:
        sub = next(a for a in parser._actions if isinstance(getattr(a, "choices", None), dict))
        parser = sub.choices[name]
    return {s for a in parser._actions for s in a.option_strings}


def _table_flags(options: tuple[opts.Option, ...]) -> set[str]:
    return {"--" + o.name.replace("_", "-") for o in options if o.cli is not None}


def test_wheelq_enqueue_has_a_flag_for_each_option_the_table_gives_one() -> None:
    assert _table_flags(OPTIONS) <= _flags("enqueue")


def test_wheelq_schedule_add_has_the_flags_of_the_runs_options_and_no_other() -> None:
    flags = _flags("schedule", "add")
    assert _table_flags(RUN) | {"--max-attempts", "--callback"} <= flags
    assert not _table_flags(tuple(o for o in STORED if not o.runs)) & flags  # --traceparent


@pytest.mark.parametrize(
    ("face", "options"),
    [
        (Client.enqueue, STORED),
        (outbox_enqueue, STORED),
        (Task.options, STORED),
        (Admin.schedule, RUN),
        (AsyncAdmin.schedule, RUN),
    ],
)
def test_each_face_shows_its_options_in_its_signature_and_docs(
    face: Any, options: tuple[opts.Option, ...]
) -> None:
    parameters = inspect.signature(face).parameters
    for o in options:
        assert o.name in parameters
        assert o.doc.split()[0] in (face.__doc__ or "")


def test_an_int_options_default_is_checked_without_a_literal_is() -> None:
    """The generated `stored_values` compared a default with ``is`` (``v is 0`` for an int
    option: a SyntaxWarning, an error under the suite's warnings, at import); a default that
    is no bool is matched by its type and value, so False is not an int's 0."""
    same = opts._same_as("v", 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compile(f"v = 1\nabsent = v is None or {same}", "<generated>", "exec")
    assert eval(same, {"v": 0})
    assert not eval(same, {"v": False}) and not eval(same, {"v": 3})


@pytest.mark.parametrize("option", STORED, ids=lambda o: o.name)
def test_the_outbox_relay_takes_each_stored_options_slot_and_refuses_a_misspelt_one(
    option: opts.Option,
) -> None:
    """The relay's envelope check reads every slot of the table (a new option's too), as
    `enqueue` writes it; a slot no writer spells is refused, naming the option."""
    write = validate_item(ClientSettings(), item_with(option), EncodeBatch(1_000))
    order_key = write.order_key
    mode = "a" if order_key else "d"
    held = HeldJob(1, "t", write.id, mode, 1_000, False, write.envelope, 0, "", order_key)
    assert refusal(held, 1_000, 1_000) is None
    fields = msgpack.unpackb(write.envelope, raw=False, unicode_errors="surrogateescape")
    misspelt = {
        "text": "\x00",
        "trace": "x",
        "callback": "\udcc1",
        "flag": "2",
        "int": "05",
        "time": "05",
        "priority": "5",  # the default is written as no byte
    }
    fields[7 + STORED.index(option)] = misspelt[option.kind or ""]  # its slot: 8 on
    packed = msgpack.packb(fields, unicode_errors="surrogateescape")
    bad = HeldJob(1, "t", write.id, mode, 1_000, False, packed, 0, "", order_key)
    why = refusal(bad, 1_000, 1_000)
    assert why is not None and option.name in why, why
