"""scheduler.shares: each node's quota of shards (sums to the total, even to within one, a node
counts itself) and the rendezvous ranking (a deterministic permutation)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wheelq.scheduler.lease_keeper import preference, quota, rank

node_ids = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=12)
node_sets = st.sets(node_ids, min_size=1, max_size=40)
totals = st.integers(min_value=0, max_value=1024)


@pytest.mark.parametrize(
    ("node", "live", "total", "expected"),
    [
        ("a", ["a"], 5, 5),
        ("a", [], 5, 5),  # a lone starting node takes everything
        ("a", ["a", "b"], 5, 3),  # the remainder goes first in id order
        ("b", ["a", "b"], 5, 2),
        ("b", ["b", "a"], 5, 2),  # input order does not matter
        ("z", ["a"], 5, 2),  # not yet visible: counts itself
        ("a", ["a", "a", "b"], 4, 2),  # duplicates count once
        ("a", ["a", "b", "c"], 2, 1),
        ("b", ["a", "b", "c"], 2, 1),
        ("c", ["a", "b", "c"], 2, 0),  # fewer shards than nodes
        ("a", ["a", "b"], 0, 0),
        ("n10", ["n2", "n10", "n9"], 4, 2),  # string order: "n10" < "n2" < "n9"
        ("n9", ["n2", "n10", "n9"], 4, 1),
    ],
)
def test_quota_table(node: str, live: list[str], total: int, expected: int) -> None:
    assert quota(node, live, total) == expected


@settings(max_examples=200)
@given(node_sets, totals)
def test_quotas_sum_to_the_total_and_differ_by_at_most_one(nodes: set[str], total: int) -> None:
    quotas = {node: quota(node, nodes, total) for node in nodes}
    assert sum(quotas.values()) == total
    assert max(quotas.values()) - min(quotas.values()) <= 1
    base = total // len(nodes)
    # the larger quotas go to the first ids in sorted order
    ordered = [quotas[node] for node in sorted(nodes)]
    assert ordered == sorted(ordered, reverse=True)
    assert ordered.count(base + 1) == total % len(nodes)


@settings(max_examples=200)
@given(node_sets, node_ids, totals)
def test_a_node_missing_from_live_nodes_counts_itself(
    live: set[str], node: str, total: int
) -> None:
    assert quota(node, live - {node}, total) == quota(node, live | {node}, total)


@settings(max_examples=200)
@given(st.lists(node_ids, min_size=1, max_size=20), totals, st.randoms(use_true_random=False))
def test_quota_ignores_order_and_duplicates(
    live: list[str], total: int, rnd: random.Random
) -> None:
    shuffled = live + rnd.sample(live, len(live))
    rnd.shuffle(shuffled)
    for node in live:
        assert quota(node, shuffled, total) == quota(node, sorted(set(live)), total)


# --- rank -------------------------------------------------------------------------------------


def shard_names(count: int) -> dict[int, str]:
    return {s: f"{{emails:{s}}}" for s in range(count)}


@settings(max_examples=200)
@given(node_ids, st.integers(min_value=0, max_value=64))
def test_rank_is_a_deterministic_permutation_by_preference(node: str, count: int) -> None:
    names = shard_names(count)
    shards = list(names)
    ranked = rank(node, shards, names)
    assert sorted(ranked) == shards
    if not _has_ties(node, names):  # sorted() is stable: only ties depend on input order
        assert rank(node, list(reversed(shards)), names) == ranked
    weights = [preference(node, names[s]) for s in ranked]
    assert weights == sorted(weights, reverse=True)


def _has_ties(node: str, names: dict[int, str]) -> bool:
    weights = [preference(node, name) for name in names.values()]
    return len(set(weights)) < len(weights)


@settings(max_examples=200)
@given(node_ids, st.sets(st.integers(0, 63)))
def test_rank_of_a_subset_keeps_the_relative_order(node: str, subset: set[int]) -> None:
    names = shard_names(64)
    full = rank(node, list(names), names)
    assert rank(node, sorted(subset), names) == [s for s in full if s in subset]


def test_preference_is_stable_and_depends_on_node_and_shard() -> None:
    assert preference("node-a", "{emails:0}") == preference("node-a", "{emails:0}")
    assert len({preference(n, "{emails:0}") for n in ("node-a", "node-b", "node-c")}) == 3
    assert len({preference("node-a", f"{{emails:{s}}}") for s in range(16)}) == 16


def test_different_nodes_prefer_different_shards() -> None:
    names = shard_names(16)
    firsts = {rank(f"node-{i}", list(names), names)[0] for i in range(8)}
    assert len(firsts) > 1
