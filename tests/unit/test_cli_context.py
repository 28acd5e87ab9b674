"""The CLI's pure parts: config checking, topic lists, URL redaction, JSON of payloads."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from wheelq.cli.context import CliError, load_config, redacted, split_topics
from wheelq.core.payload import jsonable

ROOT = Path(__file__).resolve().parents[2]


def test_the_example_config_passes_with_every_key_uncommented(tmp_path: Path) -> None:
    text = (ROOT / "config" / "wheelq.toml").read_text()
    uncommented = re.sub(r"^# (\w+ = )", r"\1", text, flags=re.MULTILINE)
    assert uncommented.count("\n# ") < text.count("\n# ")  # some keys were commented out
    path = tmp_path / "wheelq.toml"
    path.write_text(uncommented)
    config = load_config(str(path))
    assert config["scheduler"]["topics"] == ["emails", "billing"]
    assert config["worker"]["group"] == "default"


@pytest.mark.parametrize(
    ("value", "topics"),
    [("a, b", ["a", "b"]), (" a ,b,, ", ["a", "b"]), (["a ", " b"], ["a", "b"]), ("a", ["a"])],
)
def test_topics_are_trimmed(value: object, topics: list[str]) -> None:
    assert split_topics(value, "--topics") == topics


@pytest.mark.parametrize("value", [" , ", [], 3, ["a", 1]])
def test_topics_must_name_a_topic(value: object) -> None:
    with pytest.raises(CliError) as caught:
        split_topics(value, "--topics")
    assert caught.value.code == 2
    assert "--topics" in str(caught.value)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://h:1/0", "redis://h:1/0"),
        ("redis://u:secret@h:1/0", "redis://u:***@h:1/0"),
        ("redis://:p@ss/w@h:1/0", "redis://:***@h:1/0"),
        ("rediss://token@h", "rediss://***@h"),
    ],
)
def test_passwords_never_show(url: str, shown: str) -> None:
    assert redacted(url) == shown


def test_payloads_become_json() -> None:
    payload = {"a": [1, 2.5, None, True, b"\x01"], 3: float("nan"), b"k": (1,), "o": object}
    assert jsonable(payload) == {
        "a": [1, 2.5, None, True, {"$bytes": "AQ=="}],
        "3": {"$float": "nan"},
        '{"$bytes": "aw=="}': [1],
        "o": {"$repr": repr(object)},
    }


def test_every_option_of_every_command_has_help() -> None:
    # Issue 43 item 17: `wheelq deliver --topic` had none.
    import argparse

    from wheelq.cli import build_parser

    def options(parser: argparse.ArgumentParser, name: str) -> list[tuple[str, str]]:
        found = []
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub, child in action.choices.items():
                    found += options(child, f"{name} {sub}")
            elif action.option_strings and not (action.help or "").strip():
                found.append((name, action.option_strings[-1]))
        return found

    assert options(build_parser(), "wheelq") == []
