"""The CLI reference page (docs/reference/cli.md), from `wheelq.cli.build_parser()`."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from docs.scripts.markdown_text import code, header, prose, sentence, slug, table
from wheelq.cli import build_parser
from wheelq.cli.context import ENVIRONMENT

USAGE_WIDTH = 88  # usage lines are wrapped at this width, whatever the terminal


@dataclasses.dataclass(frozen=True)
class Command:
    """One (sub)command of the parser: its words after ``wheelq``, help and parser."""

    words: tuple[str, ...]
    help: str
    parser: argparse.ArgumentParser

    @property
    def name(self) -> str:
        return " ".join(("wheelq", *self.words))

    @property
    def anchor(self) -> str:
        return slug(self.name)


def subcommands(parser: argparse.ArgumentParser) -> argparse._SubParsersAction[Any] | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    return None


def walk(parser: argparse.ArgumentParser, words: tuple[str, ...] = ()) -> Iterator[Command]:
    """Every subcommand, depth first, in the order ``--help`` lists them."""
    sub = subcommands(parser)
    if sub is None:
        return
    helps = {choice.dest: choice.help or "" for choice in sub._choices_actions}
    for name, child in sub.choices.items():
        command = Command((*words, name), helps.get(name, ""), child)
        yield command
        yield from walk(child, command.words)


def metavar(action: argparse.Action) -> str:
    """What an option takes, or a positional's name: ``LOG_LEVEL``, ``{earliest,now}``."""
    if action.metavar is not None:
        return str(action.metavar)
    if action.choices is not None:
        return "{" + ",".join(map(str, action.choices)) + "}"
    return action.dest.upper() if action.option_strings else action.dest


def takes(action: argparse.Action) -> str:
    """The value part of a usage item, after its nargs: ``X``, ``[X]``, ``[X ...]``."""
    name = metavar(action)
    if isinstance(action, argparse._SubParsersAction):
        return f"{name} ..."
    return {
        0: "",
        "?": f"[{name}]",
        "*": f"[{name} ...]",
        "+": f"{name} [{name} ...]",
    }.get(action.nargs, name)


def usage(parser: argparse.ArgumentParser) -> str:
    """The usage lines, as ``--help`` prints them but built here, so that neither the
    terminal's width nor the Python version changes them: options in brackets (alternatives
    in one pair), positionals after, wrapped at `USAGE_WIDTH`."""
    grouped = {
        id(action): group
        for group in parser._mutually_exclusive_groups
        for action in group._group_actions
    }
    items: list[str] = []
    seen: set[int] = set()
    for action in [a for a in parser._actions if a.option_strings]:
        if action.help == argparse.SUPPRESS:
            continue
        group = grouped.get(id(action))
        if group is None:
            item = " ".join(filter(None, (action.option_strings[0], takes(action))))
            items.append(item if action.required else f"[{item}]")
        elif id(group) not in seen:
            seen.add(id(group))
            choices = " | ".join(
                " ".join(filter(None, (a.option_strings[0], takes(a))))
                for a in group._group_actions
            )
            items.append(f"({choices})" if group.required else f"[{choices}]")
    positionals = [takes(a) for a in parser._actions if not a.option_strings]
    lead = f"usage: {parser.prog}"
    if len(" ".join([lead, *items, *positionals])) <= USAGE_WIDTH:
        return " ".join([lead, *items, *positionals])
    indent = " " * len(lead)
    lines = wrapped(lead, items) if items else [lead]
    if positionals:  # on lines of their own, as argparse does when it wraps
        lines += wrapped(indent, positionals)
    return "\n".join(lines)


def wrapped(lead: str, items: Sequence[str]) -> list[str]:
    """`items` after `lead`, then on lines indented as far, at most `USAGE_WIDTH` wide."""
    lines, line = [], lead
    for item in items:
        if len(line) + 1 + len(item) > USAGE_WIDTH and line not in (lead, " " * len(lead)):
            lines.append(line)
            line = " " * len(lead)
        line += " " + item
    return [*lines, line]


def shown(action: argparse.Action) -> bool:
    return action.help != argparse.SUPPRESS and not isinstance(
        action, argparse._SubParsersAction | argparse._HelpAction
    )


def expanded_help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    if not action.help:
        return ""
    return argparse.HelpFormatter(parser.prog)._expand_help(action)


def option_name(action: argparse.Action) -> str:
    """``--from {earliest,now}``, ``--json``: the option strings with the value they take."""
    value = takes(action)
    return ", ".join(" ".join(filter(None, (opt, value))) for opt in action.option_strings)


def describe_action(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """Help, choices, default and whether it is required, as one cell."""
    parts = [prose(sentence(expanded_help(parser, action)))] if action.help else []
    if action.choices and not isinstance(action.choices, Mapping):
        parts.append("One of " + ", ".join(code(str(c)) for c in action.choices) + ".")
    default = action.default
    if (
        action.nargs != 0
        and default not in (None, argparse.SUPPRESS)
        and f"default {default}" not in (action.help or "")
    ):
        parts.append(f"Default: {code(str(default))}.")
    if action.required and action.option_strings:  # positionals are, unless nargs says not
        parts.append("**Required.**")
    if action.nargs in ("*", "+"):
        parts.append("Repeatable." if action.option_strings else "Any number of them.")
    elif action.nargs == "?" and not action.option_strings:
        parts.append("Optional.")
    return " ".join(parts) or "&nbsp;"


def option_key(action: argparse.Action) -> tuple[tuple[str, ...], str]:
    return tuple(action.option_strings), action.help or ""


def shared_options(commands: Sequence[Command]) -> list[argparse.Action]:
    """The options (``--redis-url``, ...) most commands take alike, listed once."""
    counts: dict[tuple[tuple[str, ...], str], int] = {}
    first: dict[tuple[tuple[str, ...], str], argparse.Action] = {}
    leaves = [c for c in commands if subcommands(c.parser) is None]
    for command in leaves:
        for action in command.parser._actions:
            if action.option_strings and shown(action):
                counts[option_key(action)] = counts.get(option_key(action), 0) + 1
                first.setdefault(option_key(action), action)
    return [first[key] for key, n in counts.items() if n * 2 > len(leaves)]


def exceptions(commands: Sequence[Command], shared: Sequence[argparse.Action]) -> str:
    """A sentence naming the commands that take only some of the `shared` options."""
    keys = [option_key(a) for a in shared]
    notes = []
    for command in commands:
        if subcommands(command.parser) is not None:
            continue
        has = {option_key(a) for a in command.parser._actions}
        if not all(key in has for key in keys):
            names = [code(a.option_strings[-1]) for a in shared if option_key(a) in has]
            notes.append(f"{code(command.name)} takes only {' and '.join(names) or 'none'}")
    return f" Of these, {'; '.join(notes)}." if notes else ""


def cli_page() -> str:
    parser = build_parser()
    commands = list(walk(parser))
    shared = shared_options(commands)
    shared_keys = {option_key(a) for a in shared}
    out = [
        header("wheelq.cli.build_parser()"),
        "",
        "# CLI",
        "",
        prose(parser.description or ""),
        "",
        "`wheelq --help` and `wheelq COMMAND --help` print what this page says. Every "
        "setting of the [configuration](configuration.md) file can also be given as an "
        "environment variable; a flag is over both.",
        "",
        "A command that fails says why in one line on stderr. Its exit status: 0 done; 1 "
        "a failure while running, or a name that is not there (an unknown topic reads "
        "`no such topic 'x' (topics: ...)`; an unknown job, group or schedule exits 1 "
        "too); 2 a command line, configuration or environment that cannot run (a missing "
        "extra too); 130 interrupted.",
        "",
        "```text",
        usage(parser),
        "```",
        "",
        "## Options of `wheelq` {#options}",
        "",
        *table(
            ["Option", "Description"],
            [
                (code(option_name(a)), describe_action(parser, a))
                for a in parser._actions
                if a.option_strings and shown(a)
            ],
        ),
        "## Options every command takes {#shared-options}",
        "",
        "Given before or after the command's own arguments." + exceptions(commands, shared),
        "",
        *table(
            ["Option", "Description"],
            [(code(option_name(a)), describe_action(parser, a)) for a in shared],
        ),
        "## Environment variables {#environment}",
        "",
        "A flag is over its variable. [Configuration](configuration.md#sections) lists "
        "every `WHEELQ_<SECTION>_<KEY>` variable.",
        "",
        *table(
            ["Variable", "Description"],
            [(code(name), prose(sentence(text))) for name, text in ENVIRONMENT.items()],
        ),
        "## Commands",
        "",
        *table(
            ["Command", "What it does"],
            [(f"[{code(c.name)}](#{c.anchor})", prose(sentence(c.help))) for c in commands],
        ),
    ]
    for command in commands:
        out += command_section(command, shared_keys)
    return "\n".join(out).rstrip() + "\n"


def command_section(command: Command, shared: set[tuple[tuple[str, ...], str]]) -> list[str]:
    parser = command.parser
    level = "#" * min(len(command.words) + 1, 4)
    out = [f"{level} `{command.name}` {{#{command.anchor}}}", "", prose(sentence(command.help)), ""]
    if parser.description:
        out += [prose(parser.description), ""]
    out += ["```text", usage(parser), "```", ""]
    positionals = [a for a in parser._actions if not a.option_strings and shown(a)]
    if positionals:
        out += table(
            ["Argument", "Description"],
            [(code(metavar(a)), describe_action(parser, a)) for a in positionals],
        )
    options = [a for a in parser._actions if a.option_strings and shown(a)]
    own = [a for a in options if option_key(a) not in shared]
    if own:
        out += table(
            ["Option", "Description"],
            [(code(option_name(a)), describe_action(parser, a)) for a in own],
        )
    common = [a for a in options if option_key(a) in shared]
    if common:
        names = ", ".join(code(a.option_strings[-1]) for a in common)
        out += [f"Also takes {names} ([options every command takes](#shared-options)).", ""]
    sub = subcommands(parser)
    if sub is not None:
        children = [c for c in walk(parser, command.words)]
        direct = [c for c in children if len(c.words) == len(command.words) + 1]
        out += table(
            ["Command", "What it does"],
            [(f"[{code(c.name)}](#{c.anchor})", prose(sentence(c.help))) for c in direct],
        )
    if parser.epilog:
        out += ["```text", parser.epilog.strip(), "```", ""]
    return out
