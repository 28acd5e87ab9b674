"""core.options: the one table of a job's options, and every face and wire shape held to it."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, get_type_hints

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wheelq.cli import build_parser
from wheelq.core import options as opts
from wheelq.core.callback import Callback
from wheelq.core.job import READY_ENTRY, Envelope, Job
from wheelq.core.options import (
    OPTIONS,
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
from wheelq.producer.client import Client
from wheelq.producer.items import EncodeBatch, validate_item
from wheelq.tasks.task import Task
from wheelq.web.models.enqueue import JobIn

# A value of each stored kind other than its unset one, as a caller gives it
GIVEN: dict[str, Any] = {
    "text": "k-1",
    "trace": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    "callback": "https://example.com/hook",
    "flag": True,
    "int": 3,
}


def test_the_typed_spellings_name_exactly_the_tables_options() -> None:
    names = [o.name for o in OPTIONS]
    assert list(EnqueueItem._fields) == ["payload", *names]
    assert set(get_type_hints(ItemOptions)) == set(names)
    assert set(get_type_hints(EnqueueKwargs)) == {*names, "ack", "debounce_ms", "max_wait_ms"}
    shared = {o.name for o in OPTIONS if o.shared}
    assert set(get_type_hints(opts.BulkOptions)) == {"delay", "at", "ack", *shared}
    assert set(get_type_hints(opts.SharedOptions)) == shared
    assert set(get_type_hints(TaskCallOptions)) == set(names) - {"delay", "at"} | {"ack"}


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
    expected = Callback(GIVEN["callback"]) if option.kind == "callback" else GIVEN[option.kind]
    assert value == expected
    again = Envelope.unpack(retry_envelope(job, b"p", 1, "g"))
    assert getattr(again, option.name) == stored
    from wheelq.core.history import entry_options

    shown = entry_options(fields)[option.name]
    assert shown == (GIVEN["callback"] if option.kind == "callback" else GIVEN[option.kind])


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


def test_wheelq_enqueue_has_a_flag_for_each_option_the_table_gives_one() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command" or a.choices)  # subparsers
    assert isinstance(sub.choices, dict)
    flags = {s for a in sub.choices["enqueue"]._actions for s in a.option_strings}
    for o in OPTIONS:
        if o.cli is not None:
            assert "--" + o.name.replace("_", "-") in flags, o.name


@pytest.mark.parametrize("face", [Client.enqueue, outbox_enqueue, Task.options])
def test_each_face_shows_its_options_in_its_signature_and_docs(face: Any) -> None:
    parameters = inspect.signature(face).parameters
    for o in STORED:
        assert o.name in parameters
        assert o.doc.split()[0] in (face.__doc__ or "")
