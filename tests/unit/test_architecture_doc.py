"""Citations of docs/architecture.md point at invariants it has, and nothing cites the design
briefs kept outside the repository."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
SCANNED = ("wheelq", "tests", "loadtest", "config", "docs")
SUFFIXES = {".py", ".lua", ".md", ".toml", ".txt"}

HEADING = re.compile(r"^### (\d+)\. ", re.MULTILINE)
CITATION = re.compile(
    r"docs/architecture\.md,[\s#]*invariants?\s+(\d+(?:\s*,\s*\d+)*(?:\s+and\s+\d+)?)"
)
BRIEF = re.compile(r"\b(?:DESIGN|STYLE)\b")


def sources() -> list[Path]:
    files = [ROOT / "README.md"]
    for top in SCANNED:
        files += [
            p
            for p in sorted((ROOT / top).rglob("*"))
            if p.suffix in SUFFIXES and "node_modules" not in p.parts  # npm's, not ours
        ]
    return [p for p in files if p.resolve() != Path(__file__).resolve()]


def invariants() -> list[int]:
    return [int(n) for n in HEADING.findall(DOC.read_text("utf-8"))]


def test_invariants_are_numbered_from_1_without_gaps() -> None:
    numbers = invariants()
    assert numbers == list(range(1, len(numbers) + 1))
    assert len(numbers) >= 8


def test_every_citation_names_an_invariant_the_document_has() -> None:
    known = set(invariants())
    cited: list[tuple[str, int]] = []
    for path in sources():
        for match in CITATION.finditer(path.read_text("utf-8")):
            cited += [(str(path.relative_to(ROOT)), int(n)) for n in re.findall(r"\d+", match[1])]
    assert cited, "no citation of docs/architecture.md found: the pattern is out of date"
    assert [c for c in cited if c[1] not in known] == []


def test_nothing_cites_the_briefs_outside_the_repository() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in sources()
        for n, line in enumerate(path.read_text("utf-8").splitlines(), 1)
        if BRIEF.search(line)
    ]
    assert found == []


def _section(title: str) -> str:
    text = DOC.read_text("utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def test_the_key_layout_table_lists_exactly_the_keys_keys_py_makes() -> None:
    """The key layout is written once, in the document; keys.py makes the strings. Every
    per-shard key and global key in one is in the other."""
    from wheelq.core import keys

    rows = re.findall(r"^\| `([^`]+)` \|", _section("Key layout"), re.MULTILINE)
    shard = keys.ShardKeys("T", 0)
    made = {getattr(shard, name).replace("{T:0}", "{T:s}") for name in keys.DATA_KEY_NAMES}
    made.add(shard.wake_channel.replace("{T:0}", "{T:s}"))
    made.add(keys.selection_key(shard, "<name>").replace("{T:0}", "{T:s}"))
    made.add(keys.selection_mark_key("T", "<name>"))
    made.add(keys.selection_stamps_key(shard, "<name>").replace("{T:0}", "{T:s}"))
    made.add(keys.far_leaf_key(shard, "<leaf>").replace("{T:0}", "{T:s}"))
    made.add(keys.far_buckets_key(shard).replace("{T:0}", "{T:s}"))
    made.add(keys.lane_key(shard, "<lane>").replace("{T:0}", "{T:s}"))
    made.add(keys.key_list_key(shard, "<key>").replace("{T:0}", "{T:s}"))
    made.add(keys.early_key(shard, "<token>").replace("{T:0}", "{T:s}"))
    made.add(keys.joined_key(shard, "<token>").replace("{T:0}", "{T:s}"))
    made.add(keys.children_key(shard, "<id>").replace("{T:0}", "{T:s}"))
    made.add(keys.far_live_key(shard).replace("{T:0}", "{T:s}"))
    made.add(keys.far_index_key(shard, "<n>").replace("{T:0}", "{T:s}"))
    made.add(keys.result_key(shard, "<id>\\x1f<group>").replace("{T:0}", "{T:s}"))
    made |= {
        keys.TOPICS_KEY,
        keys.MEMBERSHIP_KEY,
        keys.SCHEDULED_KEY,
        keys.CALLBACK_TOPICS_KEY,
        keys.RECEIPT_KEY,
        keys.PAUSED_KEY,
        keys.PAUSED_CHANNEL,
        keys.PROCESSES_KEY,
        keys.PROCESS_RECORDS_KEY,
        keys.nodes_key("T"),
    }
    listed = {row for row in rows if not row.startswith(("wheelq:order:", "wheelq:flow:"))}
    assert listed == made


def test_the_module_map_names_every_module_and_only_modules_that_exist() -> None:
    """docs/architecture.md's module map matches the tree: every package and module in
    wheelq/ is named (``__init__``/``__main__`` aside), and every path it names exists."""
    named = set(re.findall(r"`(wheelq/[\w/]+(?:\.py|/))`", _section("Module map")))
    package = ROOT / "wheelq"
    modules = {
        str(p.relative_to(ROOT))
        for p in package.rglob("*.py")
        if p.name not in {"__init__.py", "__main__.py"}
    }
    packages = {
        str(p.relative_to(ROOT)) + "/" for p in package.iterdir() if (p / "__init__.py").exists()
    }
    assert sorted((modules | packages) - named) == []
    assert sorted(p for p in named if not (ROOT / p).exists()) == []


def test_every_fast_path_names_a_test_that_exists() -> None:
    """Each row of "Fast paths" names the test that holds it equal to the plain path: the
    file exists, and so does every test function named after it (``file::name``, then
    ``::name`` for more in the same file)."""
    rows = [r for r in _section("Fast paths").splitlines() if r.startswith("| `")]
    assert len(rows) >= 5
    missing = []
    for row in rows:
        cell = row.split(" | ")[2]
        paths = re.findall(r"`(tests/[\w/]+\.py)", cell)
        assert paths, f"no test named in {row[:80]!r}"
        for path in paths:
            own = cell[cell.index(path) :]  # up to the next file named
            own = own[: own.find("`tests/")] if "`tests/" in own else own
            if not (ROOT / path).exists():
                missing.append(path)
                continue
            text = (ROOT / path).read_text("utf-8")
            missing += [f"{path}::{n}" for n in re.findall(r"::(\w+)", own)
                        if f"def {n}(" not in text]  # fmt: skip
    assert missing == []
