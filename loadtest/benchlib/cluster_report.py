"""The cluster scenario's part of results.md: the scaling table (one row per primaries x
shards x scheduler nodes), the per-job costs and the steady-rate lateness."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def markdown_lines(res: dict[str, Any]) -> list[str]:
    """The scaling table of results.md (nothing when the scenario did not run)."""
    c = res.get("cluster") or {}
    if not c.get("rows"):
        return [] if not c else ["", "## Redis Cluster", "", f"error: {c.get('error')}"]
    lines = [
        "",
        f"## Redis Cluster: a burst of {c['jobs']:,} jobs due at one instant"
        + (f" (median of {c['repeats']} runs)" if c["repeats"] > 1 else ""),
        "",
        "Cores busy while firing: CPU seconds from just before the due time until every entry "
        "was seen, over the span from the due time to the last entry (the machine's figure "
        "counts every process on it; others' is the part that is not this bench's). "
        "Short bursts (--quick) make these coarse: /proc counts in 10 ms ticks. "
        f"The machine has {c.get('machine_cores', '?')} cores; *at its limit*: a primary or a "
        "scheduler process (on average) at 0.9 of a core or more, or the machine at 0.9 of its "
        "cores (then the machine, not wheelq, set the row's figures: "
        f"{c.get('machine_bound_rows', '?')} of {len(c['rows'])} rows).",
        "",
        "| primaries | shards (per primary) | scheduler nodes | fired/s (range) | "
        "entry - due p50 / p99 / max ms | Redis cores per primary | scheduler cores | "
        "machine cores (others') | Redis CPU us per job: firing, enqueue + preload | "
        "scheduler CPU us per job | vs 1 primary | at its limit |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for x in c["rows"]:
        late, busy, cost = x["entry_lateness_ms"], x["cores_busy"], x["cpu_us_per_job"]
        lo, hi = x["fired_per_s_range"]
        spread = f" ({lo:,}-{hi:,})" if lo != hi else ""
        per = " / ".join(str(v) for v in x["shards_per_primary"])
        lines.append(
            f"| {x['primaries']} | {x['shards']} ({per}) | {x['nodes']} | "
            f"{x['fired_per_s']:,}{spread} | {late['p50']:.0f} / {late['p99']:.0f} / "
            f"{late['max']:.0f} | {' / '.join(str(v) for v in busy['redis_per_primary'])} | "
            f"{busy['schedulers']} | {busy['machine']} ({busy['others']}) | "
            f"{cost['redis_firing']}, {cost['redis_enqueue_preload']} | {cost['schedulers']} | "
            f"{x.get('ratio_to_1_primary', '')}{'x' if 'ratio_to_1_primary' in x else ''} | "
            f"{'; '.join(x.get('at_limit', [])) or '-'} |"
        )
    costs = [x["cpu_us_per_job"] | {"net": x["net_bytes_per_job"]} for x in c["rows"]]
    lines += [
        "",
        "Per job, median over the rows: Redis CPU "
        f"{_median(y['redis_firing'] for y in costs)} us firing + "
        f"{_median(y['redis_enqueue_preload'] for y in costs)} us enqueue and preload, "
        f"scheduler CPU {_median(y['schedulers'] for y in costs)} us, "
        f"{_median(y['net'] for y in costs):,} bytes in + out of the primaries.",
    ]
    lines += _steady_lines(c)
    bad = [x for x in c["rows"] if x["missing"] or x["duplicates"] or x["early"]]
    lines.append("")
    lines.append(
        "missing / duplicate / early entries: none"
        if not bad
        else "missing / duplicate / early entries in: "
        + ", ".join(f"{x['primaries']}p {x['shards']}s {x['nodes']}n" for x in bad)
    )
    return lines


def _median(values: Iterable[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def _steady_lines(c: dict[str, Any]) -> list[str]:
    rows = [x for x in c["rows"] if x.get("steady")]
    if not rows:
        return []
    lines = [
        "",
        f"Steady: one node, {rows[0]['steady']['rate_per_s']:,} jobs/s for {c['steady_s']} s "
        "(CPU per job over the whole run: firing and preloading).",
        "",
        "| primaries | shards | entry - due p50 / p99 / p99.9 / max ms | Redis CPU us per job "
        "| scheduler CPU us per job |",
        "|---|---|---|---|---|",
    ]
    for x in rows:
        st = x["steady"]
        late, cost = st["entry_lateness_ms"], st["cpu_us_per_job"]
        shown = " / ".join(f"{late[q]:.0f}" for q in ("p50", "p99", "p99.9", "max"))
        lines.append(
            f"| {x['primaries']} | {x['shards']} | {shown} | {cost['redis_firing']} | "
            f"{cost['schedulers']} |"
        )
    return lines
