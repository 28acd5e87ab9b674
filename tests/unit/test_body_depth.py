"""`deep_body_problem`: how deep a JSON request body nests, and the field it names, read
past strings that hold brackets and quotes (the HTTP checks are in test_deep_payloads)."""

from __future__ import annotations

import json

import pytest

from wheelq.core.payload import MAX_PAYLOAD_DEPTH
from wheelq.web.problems import MAX_BODY_DEPTH, deep_body_problem


def lists(levels: int) -> str:
    return "[" * levels + "1" + "]" * levels


def body(template: str, levels: int) -> bytes:
    """`template` with its ``DEEP`` a value nested `levels` lists deep."""
    return template.replace("DEEP", lists(levels)).encode()


@pytest.mark.parametrize(
    ("template", "levels", "field"),
    [
        ('{"payload": DEEP}', MAX_BODY_DEPTH, "payload"),
        ('{"a": "]]}}\\"", "jobs": [{"id": "[[{"}, {"payload": DEEP}]}', 500, "jobs[1].payload"),
        ('{"max_pending": DEEP}', 2000, "max_pending"),
        ('{"callback": {"url": "u", "headers": {"h\\"]": DEEP}}}', 300, 'callback.headers.h\\"]'),
        ("DEEP", 300, "body"),
        ("]}]DEEP", 300, "body"),
    ],
)  # fmt: skip
def test_a_body_nested_past_the_bound_names_its_field_briefly(
    template: str, levels: int, field: str
) -> None:
    problem = deep_body_problem(body(template, levels))
    assert problem is not None and (problem.status, problem.field) == (422, field)
    bound = MAX_PAYLOAD_DEPTH if field.endswith("payload") else MAX_BODY_DEPTH
    assert problem.detail.startswith(field) and f"at most {bound} levels" in problem.detail


@pytest.mark.parametrize(
    "sent",
    [
        body('{"payload": DEEP}', MAX_BODY_DEPTH - 1),
        json.dumps({"payload": "[" * 5000, "id": "{" * 5000}).encode(),  # in strings only
        json.dumps({"jobs": [{"payload": [[i]]} for i in range(1000)]}).encode(),  # wide
        b"not json [[[[",
    ],
)
def test_a_body_within_the_bound_is_left_to_the_parser(sent: bytes) -> None:
    assert deep_body_problem(sent) is None
