"""core.job: the note format, the field names readers use and the entry's one definition."""

from __future__ import annotations

import dataclasses
import re
from importlib import resources

import pytest

from wheelq.core.job import READY_ENTRY, Envelope, Field, Job, parse_note, parse_notes


@pytest.mark.parametrize(
    ("note", "parsed"),
    [
        (b"1700000000123:j1", ("j1", 1_700_000_000_123)),
        (b"0:a:b", ("a:b", 0)),  # a job id may hold colons: the first one ends the due time
        ("5:é".encode(), ("é", 5)),
    ],
)
def test_parse_note_reads_due_and_job_id(note: bytes, parsed: tuple[str, int]) -> None:
    assert parse_note(note) == parsed


@pytest.mark.parametrize(
    "note", [b"", b"marker", b"12:", b":j1", b"-5:j1", b"1.5:j1", b"\xd9\xa3:j1", b"5:\xff"]
)
def test_parse_note_of_anything_else_is_none(note: bytes) -> None:
    assert parse_note(note) is None


@pytest.mark.parametrize(
    ("message", "parsed"),
    [
        (b"1700000000123:j1", [("j1", 1_700_000_000_123)]),
        (b"5:a\n7:b:c\n6:d", [("a", 5), ("b:c", 7), ("d", 6)]),  # in order, as written
        (b"5:a\nmarker\n\n6:d", [("a", 5), ("d", 6)]),  # what is not a note is left out
        (b"marker", []),
    ],
)
def test_parse_notes_reads_a_note_per_line(message: bytes, parsed: list[tuple[str, int]]) -> None:
    assert parse_notes(message) == parsed


def test_field_tables_have_no_name_twice() -> None:
    assert len(set(Field.READY)) == len(Field.READY)
    assert not set(Field.DEAD) & set(Field.READY)


def lua_entry() -> tuple[list[str], list[tuple[str, int, int | None]]]:
    """`wq_fire_entry`'s entry as ``includes/envelope.lua`` spells it: the names its XADD
    writes always, in order, and its optional rows (name, envelope slot, slot that must be set
    too)."""
    lib = (resources.files("wheelq.store") / "lua" / "includes" / "envelope.lua").read_text()
    body = lib[lib.index("local function wq_fire_entry(") :]
    call = body[body.index("redis.pcall('XADD', stream, '*',") : body.index("unpack(WQ_ENTRY_MORE")]
    always = re.findall(r"'(\w+)', [\w\[\]]+,", call.partition("'*',")[2])
    table = lib[lib.index("local WQ_ENTRY_OPTIONAL = {") : lib.index("local WQ_ENTRY_MORE")]
    rows = re.findall(r"'(\w+)', (\d+), (\d+),", table)
    return always, [(name, int(slot), int(also) or None) for name, slot, also in rows]


def test_the_script_writes_the_entry_the_definition_names() -> None:
    # READY_ENTRY and wq_fire_entry are the two spellings of one entry: same fields, same
    # order, each optional one from the envelope slot its row names
    slot = {f.name: i + 2 for i, f in enumerate(dataclasses.fields(Envelope))}  # 1: version
    always, optional = lua_entry()

    assert always == [f.name.decode() for f in READY_ENTRY if not f.optional]
    assert optional == [
        (f.name.decode(), slot[f.source], f.requires and slot[f.requires])
        for f in READY_ENTRY
        if f.optional
    ]


def test_every_row_names_a_source_a_kind_and_a_job_attribute_that_exist() -> None:
    sources = {"id", "topic", "due", *(f.name for f in dataclasses.fields(Envelope))}
    attributes = {f.name for f in dataclasses.fields(Job)}
    for f in READY_ENTRY:
        assert f.source in sources, f
        kinds = {"int", "text", "trace", "payload", "callback", "flag", "time", "priority"}
        assert f.kind in kinds, f
        assert f.job is None or f.job in attributes, f
        assert f.requires is None or f.requires in sources, f
    written_first = [f.optional for f in READY_ENTRY]
    assert written_first == sorted(written_first), "the fields written always come first"


def test_the_scripts_optional_rows_go_by_envelope_slot() -> None:
    # wq_fire_entry stops at the first row past the envelope's last slot
    _, optional = lua_entry()
    slots = [slot for _, slot, _ in optional]
    assert slots == sorted(slots)
