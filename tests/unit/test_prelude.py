"""store.scripts.for_script: a script gets the prelude's header and the declarations it
names, and those they name in turn, in the prelude's order; a comment naming a helper keeps
it (lexical, so in doubt a helper stays); several names on one ``local`` line are each a
name of it."""

from __future__ import annotations

from wheelq.store.scripts import declarations, for_script

PRELUDE = """--[[ header ]]
local A_OK = 0
local B, B_S  -- two names
local function b_set(x)
  B, B_S = x, tostring(x)
end
-- c formats
local function c_fmt(n)
  return string.format('%d', n) .. A_OK
end
local function d_unused()
  return 1
end
local function e_calls()
  return c_fmt(1)
end
"""


def test_declarations_split_at_each_top_level_local_with_its_names() -> None:
    header, parts = declarations(PRELUDE)
    assert header == "--[[ header ]]\n"
    assert [sorted(p.names) for p in parts] == [
        ["A_OK"],
        ["B", "B_S"],
        ["b_set"],
        ["c_fmt"],
        ["d_unused"],
        ["e_calls"],
    ]
    assert "".join(p.text for p in parts) == PRELUDE[len(header) :]


def test_a_script_gets_what_it_names_and_what_that_names_in_order() -> None:
    kept = for_script(PRELUDE, "return e_calls()")
    assert (
        kept
        == "--[[ header ]]\nlocal A_OK = 0\n"
        + PRELUDE[PRELUDE.index("local function c_fmt") : PRELUDE.index("local function d_unused")]
        + PRELUDE[PRELUDE.index("local function e_calls") :]
    )


def test_one_name_of_a_multi_name_local_keeps_it() -> None:
    kept = for_script(PRELUDE, "b_set(3) return B_S")
    assert "local B, B_S" in kept
    assert "d_unused" not in kept and "c_fmt" not in kept


def test_a_helper_named_only_in_a_comment_is_kept() -> None:
    assert "local function d_unused" in for_script(PRELUDE, "-- not d_unused here\nreturn 1")
    assert for_script(PRELUDE, "return 1") == "--[[ header ]]\n"
