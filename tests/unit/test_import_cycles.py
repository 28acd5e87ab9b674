"""No import circle in `wheelq`, ``TYPE_CHECKING`` imports and imports inside functions
included: a type two modules share lives below both (docs/architecture.md, "Module map").

The graph is grimp's, which import-linter is built on; a failure lists each circle (its
modules, a shortest loop through them, and every import that closes it, by line).
"""

from __future__ import annotations

from collections.abc import Iterator

import grimp

PACKAGE = "wheelq"


def circles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The graph's strongly connected sets of two modules or more (Tarjan's algorithm,
    iterative), each sorted; sorted by their first module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def imports(module: str) -> Iterator[str]:
        return iter(sorted(graph.find_modules_directly_imported_by(module)))

    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, imports(root))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, imported = work[-1]
            for other in imported:
                if other not in index:
                    index[other] = low[other] = len(index)
                    stack.append(other)
                    on_stack.add(other)
                    work.append((other, imports(other)))
                    break
                if other in on_stack:
                    low[module] = min(low[module], index[other])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[module])
                if low[module] == index[module]:
                    members = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        members.append(member)
                        if member == module:
                            break
                    if len(members) > 1:
                        found.append(sorted(members))
    return sorted(found)


def describe(graph: grimp.ImportGraph, members: list[str]) -> str:
    """One circle: its modules, a shortest loop from the first, each import inside it."""
    first, inside = members[0], set(members)
    back = min(
        (graph.find_shortest_chain(other, first) or () for other in members[1:]),
        key=lambda chain: (len(chain) or 10**9, chain),
    )
    loop = graph.find_shortest_chain(first, back[0]) if back else None
    lines = [f"circle of {len(members)} modules: {', '.join(members)}"]
    if loop and back:
        lines.append("  loop: " + " -> ".join([*loop, *back[1:]]))
    for importer in members:
        for imported in sorted(graph.find_modules_directly_imported_by(importer) & inside):
            for detail in graph.get_import_details(importer=importer, imported=imported):
                lines.append(
                    f"  {importer}:{detail['line_number']} imports {imported}"
                    f" ({detail['line_contents'].strip()})"
                )
    return "\n".join(lines)


def test_wheelq_has_no_import_circle() -> None:
    graph = grimp.build_graph(PACKAGE, exclude_type_checking_imports=False, cache_dir=None)
    found = circles(graph)
    assert not found, "import circles in wheelq:\n" + "\n".join(
        describe(graph, members) for members in found
    )


def test_a_circle_is_found_and_described_with_its_imports() -> None:
    graph = grimp.ImportGraph()
    for importer, imported in [("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.c", "p.d")]:
        graph.add_import(
            importer=importer,
            imported=imported,
            line_number=1,
            line_contents=f"import {imported}",
        )
    graph.add_import(importer="p.d", imported="p.e", line_number=2, line_contents="import p.e")
    graph.add_import(importer="p.e", imported="p.d", line_number=3, line_contents="import p.d")
    assert circles(graph) == [["p.a", "p.b", "p.c"], ["p.d", "p.e"]]
    text = describe(graph, ["p.a", "p.b", "p.c"])
    assert "loop: p.a -> p.b -> p.c -> p.a" in text
    assert "p.c:1 imports p.a (import p.a)" in text
    assert "p.c:1 imports p.d" not in text
