"""The Lua includes (`wheelq.store.scripts.Library`): a script or include names its includes
on its header's "Includes:" line; they are resolved transitively, each once, an include after
those it names; a script carries only the declarations its code reaches; an unknown include,
a cycle, or a helper used without naming its include is refused (ScriptIncludeError)."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from wheelq.errors import ScriptIncludeError
from wheelq.store import scripts
from wheelq.store.scripts import FLOW_SCRIPTS, NAMES, PROCESS_SCRIPTS, Library, declarations

LUA = resources.files("wheelq.store") / "lua"
ALL = (*NAMES, *FLOW_SCRIPTS, *PROCESS_SCRIPTS)


def include(name: str, includes: str, body: str) -> str:
    return f"--[[ includes/{name}.lua — a test's\nIncludes: {includes}\n]]\n{body}"


def script(includes: str, body: str) -> str:
    return f"--[[ s.lua — a test's\nIncludes: {includes}\n]]\n{body}"


BASE = """-- formats
local function wq_fmt(n)
  return string.format('%d', n)
end

-- two names on one line
local WQ_A, WQ_B = 1, 2
local function wq_unused()
  return 1
end
"""
LIBRARY = {
    "base": include("base", "none", BASE),
    "ids": include("ids", "base", "local function wq_id(n)\n  return wq_fmt(n) .. WQ_A\nend\n"),
    "top": include("top", "base, ids", "local function wq_top()\n  return wq_id(1)\nend\n"),
}


def test_declarations_split_at_each_top_level_local_with_the_comments_above_it() -> None:
    parts = declarations("base", BASE)
    assert [sorted(p.names) for p in parts] == [["wq_fmt"], ["WQ_A", "WQ_B"], ["wq_unused"]]
    assert parts[0].text.startswith("-- formats\nlocal function wq_fmt")
    assert parts[1].text.startswith("\n-- two names on one line\nlocal WQ_A")
    assert "".join(p.text for p in parts) == BASE


def test_includes_resolve_transitively_each_once_after_those_they_name() -> None:
    library = Library(LIBRARY)
    assert library.resolve("s.lua", ("top", "base")) == ("base", "ids", "top")
    assert library.resolve("s.lua", ("ids",)) == ("base", "ids")


def test_a_script_carries_only_the_declarations_it_reaches_in_order() -> None:
    text = script("ids", "return wq_id(3)")
    source = Library(LIBRARY).compose("s.lua", text)
    assert source == (
        BASE[: BASE.index("local function wq_unused")]
        + "local function wq_id(n)\n  return wq_fmt(n) .. WQ_A\nend\n"
        + "\n"
        + text
    )


def test_a_helper_named_in_a_comment_or_a_string_is_not_sent() -> None:
    text = script("base", "-- wq_unused\nreturn 'wq_fmt'")
    assert Library(LIBRARY).compose("s.lua", text) == text


def test_a_script_that_includes_nothing_is_sent_as_it_is() -> None:
    text = script("none", "return {0}")
    assert Library(LIBRARY).compose("s.lua", text) == text


def test_an_unknown_include_is_refused() -> None:
    with pytest.raises(ScriptIncludeError, match=r"^s\.lua: includes 'nope', which is none of"):
        Library(LIBRARY).compose("s.lua", script("base, nope", "return 1"))


def test_an_include_naming_an_unknown_include_is_refused() -> None:
    texts = {**LIBRARY, "a": include("a", "ghost", "local WQ_X = 1\n")}
    with pytest.raises(ScriptIncludeError, match=r"^includes/a\.lua: includes 'ghost'"):
        Library(texts)


def test_a_cycle_of_includes_is_refused() -> None:
    texts = {
        "a": include("a", "b", "local function wq_a()\n  return wq_b()\nend\n"),
        "b": include("b", "a", "local function wq_b()\n  return wq_a\nend\n"),
    }
    cycle = r"cycle: includes/a\.lua -> includes/b\.lua -> includes/a\.lua"
    with pytest.raises(ScriptIncludeError, match=cycle):
        Library(texts)


def test_a_helper_of_an_include_the_script_does_not_name_is_refused() -> None:
    # ids includes base, but a script calling wq_fmt names base itself
    with pytest.raises(ScriptIncludeError, match=r"^s\.lua: uses wq_fmt \(base\) without"):
        Library(LIBRARY).compose("s.lua", script("ids", "return wq_id(1) .. wq_fmt(2)"))


def test_a_helper_of_an_include_an_include_does_not_name_is_refused() -> None:
    texts = {**LIBRARY, "top": include("top", "ids", "local WQ_T = wq_fmt(1)\n")}
    with pytest.raises(ScriptIncludeError, match=r"^includes/top\.lua: uses wq_fmt \(base\)"):
        Library(texts)


def test_a_library_name_no_include_declares_is_refused() -> None:
    with pytest.raises(ScriptIncludeError, match=r"wq_missing \(no include declares it\)"):
        Library(LIBRARY).compose("s.lua", script("base", "return wq_missing()"))


def test_a_name_the_script_declares_itself_needs_no_include() -> None:
    text = script("none", "local function wq_own()\n  return 1\nend\nreturn wq_own()")
    assert Library(LIBRARY).compose("s.lua", text) == text


@pytest.mark.parametrize(
    "header",
    ["--[[ s.lua — no line\n]]\n", "--[[ s.lua — two\nIncludes: base\nIncludes: ids\n]]\n"],
)
def test_a_header_without_one_includes_line_is_refused(header: str) -> None:
    with pytest.raises(ScriptIncludeError, match=r"'Includes:' lines, expected one"):
        Library(LIBRARY).compose("s.lua", header + "return 1")


def test_code_outside_a_local_in_an_include_is_refused() -> None:
    with pytest.raises(ScriptIncludeError, match=r"body line 1 is code outside a local"):
        Library({"a": include("a", "none", "redis.call('PING')\n")})


# --- the package's own includes and scripts -------------------------------------------------


def test_each_include_opens_with_its_header_and_names_its_includes() -> None:
    files = sorted(p.name for p in (LUA / "includes").iterdir() if p.name.endswith(".lua"))
    assert files, "the package has its includes"
    for file in files:
        text = (LUA / "includes" / file).read_text("utf-8")
        assert text.startswith(f"--[[ includes/{file} — "), file
        assert len(re.findall(r"^Includes: \S", text[: text.index("\n]]\n")], re.M)) == 1, file


def declared(name: str) -> set[str]:
    """The names include `name` declares at top level, read from its file."""
    text = (LUA / "includes" / f"{name}.lua").read_text("utf-8")
    out: set[str] = set()
    for line in re.findall(r"^local (?:function )?([\w, ]+)", text, re.M):
        out.update(n.strip() for n in line.split(","))
    return out


def named_includes(text: str) -> list[str]:
    (line,) = re.findall(r"^Includes: (.*)$", text[: text.index("\n]]\n")], re.M)
    return [] if line == "none" else [n.strip() for n in line.split(",")]


@pytest.mark.parametrize("name", ALL)
def test_every_wq_name_a_script_uses_is_declared_by_an_include_it_names(name: str) -> None:
    text = (LUA / f"{name}.lua").read_text("utf-8")
    used = library_names(text)
    given = set().union(*(declared(inc) for inc in named_includes(text)))
    assert used - scripts.local_names(text) <= given


def library_names(text: str) -> set[str]:
    return {n for n in scripts.code_names(text) if re.fullmatch(r"(?:wq|WQ)_\w+", n)}


@pytest.mark.parametrize("name", ALL)
def test_every_wq_name_in_a_scripts_source_is_declared_before_it_is_used(name: str) -> None:
    # what Redis runs: a helper left out, or declared after its caller, would be a global,
    # nil when called
    source = scripts.script(name).source
    own = (LUA / f"{name}.lua").read_text("utf-8")
    assert source.endswith(own)
    known: set[str] = set()
    for part in declarations(name, source[: len(source) - len(own)]):
        assert library_names(part.text) <= known | scripts.local_names(part.text), part.names
        known |= part.names
    assert library_names(own) <= known | scripts.local_names(own)
