"""core.job: the note format and the field names readers use."""

from __future__ import annotations

import pytest

from wheelq.core.job import Field, parse_note, parse_notes


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
