"""Turning bench results into the three outputs: results.json, results.md, lateness.png.

Scenarios may return raw series under keys starting with ``_`` (lateness lists for the
plot); `strip_private` removes them before the JSON is written. The Markdown has one table
per scenario family, each figure with its ratio to the raw-Redis limit or to the peers
where the bench measured one, and the targets of docs/architecture.md with met / not met.
"""

from __future__ import annotations

import math
from typing import Any

from benchlib.cluster_report import markdown_lines as cluster_lines


def strip_private(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: strip_private(v) for k, v in value.items() if not str(k).startswith("_")}
    if isinstance(value, list):
        return [strip_private(v) for v in value]
    return value


def _get(d: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(d, dict) or key not in d:
            return None
        d = d[key]
    return d


def _num(x: Any, digits: int = 1) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if (isinstance(x, float) and x.is_integer()) or isinstance(x, int):
        return f"{int(x):,}"
    return f"{x:,.{digits}f}"


def _ratio(a: Any, b: Any) -> str:
    if not a or not b:
        return "n/a"
    return f"{a / b:.2f}x"


def _row(label: str, ours: Any, theirs: Any, digits: int = 1) -> str:
    """A table row: label, our figure, the comparison's, and theirs / ours."""
    return f"| {label} | {_num(ours, digits)} | {_num(theirs, digits)} | {_ratio(theirs, ours)} |"


def _lat(d: Any) -> str:
    if not isinstance(d, dict):
        return "n/a"
    return " / ".join(_num(d.get(q), 0) for q in ("p50", "p99", "p99.9", "max"))


def poller_cpu_ms_per_1000(loaded: dict[str, Any]) -> float | None:
    seconds = loaded.get("redis_cpu_s_per_1000_jobs")
    return None if seconds is None else round(seconds * 1000, 2)


def targets(res: dict[str, Any]) -> list[tuple[str, str, bool | None]]:
    """(target, measured, met) for each target of docs/architecture.md the bench measures."""
    acc = {int(a["rate_per_s"]): a for a in res.get("accuracy", []) if isinstance(a, dict)}
    lim = res.get("limit") or {}
    out: list[tuple[str, str, bool | None]] = []

    def add(name: str, value: Any, ok: bool | None, shown: str | None = None) -> None:
        out.append((name, shown if shown is not None else _num(value), ok))

    a20 = _get(acc.get(20000), "entry_lateness_ms")
    if a20:
        add(
            "entry lateness p99 <= 5 ms and p99.9 <= 20 ms at 20k/s",
            None,
            a20["p99"] <= 5 and a20["p99.9"] <= 20,
            f"p99 {_num(a20['p99'], 0)} ms, p99.9 {_num(a20['p99.9'], 0)} ms",
        )
    h10 = _get(acc.get(10000), "handled", "handler_start_lateness_ms")
    if h10:
        add("handler-start p99 <= 15 ms at 10k/s", h10["p99"], h10["p99"] <= 15, f"{h10['p99']} ms")
    burst = res.get("burst") or {}
    if burst.get("all_in_stream_after_s") is not None:
        s = burst["all_in_stream_after_s"]
        add(f"burst of {_num(burst['jobs'])} in the stream within 2 s", s, s <= 2, f"{s} s")
    burst_sync = res.get("burst_sync") or {}
    last_s, first_ms = (
        burst_sync.get("all_handlers_started_after_s"),
        burst_sync.get("first_handler_started_after_ms"),
    )
    if last_s is not None and first_ms is not None:
        add(
            f"burst of {_num(burst_sync['jobs'])}, one worker, sync handler: first handler "
            "started <= 10 ms and the last <= 1 s after due",
            None,
            first_ms <= 10 and last_s <= 1.0,
            f"first {first_ms} ms, last {last_s} s",
        )
    for scenario, floor, kind in (("worker", 20_000, "no-op"), ("worker_sync", 30_000, "sync")):
        per_s = _get(res, scenario, "jobs_per_s")
        if per_s:
            add(
                f"a worker process runs >= {floor:,} {kind} jobs/s",
                per_s,
                per_s >= floor,
                f"{_num(per_s)} jobs/s",
            )
    many = _get(res, "enqueue", "enqueue_many", "jobs_per_s")
    if many:
        add("enqueue_many >= 100,000 jobs/s", many, many >= 100_000, f"{_num(many)} jobs/s")
    single = _get(res, "enqueue", "single_sync")
    if single and single.get("p50_ratio_to_raw"):
        r = single["p50_ratio_to_raw"]
        add(
            "single sync enqueue <= 1.5x the raw round trip (p50, timed in turns)",
            r,
            r <= 1.5,
            f"{r:.2f}x ({single['latency_ms']['p50']} vs {single['raw_latency_ms']['p50']} ms)",
        )
    fire_raw = lim.get("fire_jobs_per_s")
    if burst.get("all_in_stream_after_s") and fire_raw:
        rate = burst["jobs"] / max(1e-3, burst["all_in_stream_after_s"])
        add(
            "firing throughput >= 50% of the raw Lua limit",
            rate,
            rate >= fire_raw / 2,
            f"{_num(rate)} vs {_num(fire_raw)} jobs/s ({rate / fire_raw:.0%})",
        )
    backlog = res.get("backlog") or {}
    base_rss = _get(acc.get(10000), "scheduler_rss_mb")
    if backlog.get("scheduler_rss_mb") and base_rss:
        add(
            "scheduler RSS bounded by the window, not the backlog",
            None,
            backlog["scheduler_rss_mb"] <= base_rss * 1.5 + 20,
            f"{backlog['scheduler_rss_mb']} MB with {_num(backlog.get('backlog_jobs'))} pending"
            f" vs {base_rss} MB without",
        )
    idle = res.get("idle") or {}
    poll_idle = _get(res, "poller", "idle")
    if idle and isinstance(poll_idle, dict):
        ours, theirs = idle.get("redis_commands_per_s"), poll_idle.get("commands_per_s")
        if ours is not None and theirs:
            add(
                "idle Redis load <= 1/20 of the 1-ms poller's",
                None,
                ours * 20 <= theirs,
                f"{_num(ours)} vs {_num(theirs)} commands/s (1/{theirs / max(ours, 1e-9):.0f})",
            )
    per_shard = idle.get("redis_commands_per_s_per_shard")
    if per_shard is not None:
        add(
            "idle <= 2 Redis commands/s per shard (scripts' own commands counted)",
            None,
            per_shard <= 2,
            f"{per_shard} per shard, {idle.get('topics')} x {idle.get('shards_per_topic')}",
        )
    eff = res.get("efficiency") or {}
    poll_loaded = _get(res, "poller", "loaded")
    if eff and isinstance(poll_loaded, dict):
        ours = eff.get("redis_cpu_ms_per_1000_fired")
        theirs = poller_cpu_ms_per_1000(poll_loaded)
        if ours is not None and theirs:
            add(
                "Redis CPU per fired job <= the poller's at 10k/s",
                None,
                ours <= theirs,
                f"{ours} vs {theirs} ms per 1,000 jobs",
            )
    return out


def markdown(res: dict[str, Any]) -> str:
    lines = [f"# wheelq bench ({res.get('meta', {}).get('mode', '')})", ""]
    meta = res.get("meta", {})
    lines += [f"- {k}: {v}" for k, v in meta.items()] + [""]
    lim = res.get("limit") or {}
    lines += [
        "## Targets (docs/architecture.md)",
        "",
        "| target | measured | met |",
        "|---|---|---|",
    ]
    for name, shown, ok in targets(res):
        lines.append(f"| {name} | {shown} | {'met' if ok else 'not met'} |")
    lines += ["", "## Enqueue", "", "| how | wheelq | raw redis-py | wheelq / raw |"]
    lines.append("|---|---|---|---|")
    enq = res.get("enqueue") or {}
    many, raw_many = _get(enq, "enqueue_many", "jobs_per_s"), lim.get("enqueue_jobs_per_s")
    lines.append(
        f"| enqueue_many, jobs/s | {_num(many)} | {_num(raw_many)} | {_ratio(many, raw_many)} |"
    )
    raw_lua = lim.get("enqueue_lua_jobs_per_s")
    lines.append(
        f"| enqueue_many against a raw Lua batch, jobs/s | {_num(many)} | {_num(raw_lua)} | "
        f"{_ratio(many, raw_lua)} |"
    )
    one = _get(enq, "single_sync", "latency_ms", "p50")
    raw_one = _get(enq, "single_sync", "raw_latency_ms", "p50")
    lines.append(
        f"| single sync call, p50 ms | {_num(one, 3)} | {_num(raw_one, 3)} | "
        f"{_ratio(one, raw_one)} |"
    )
    lines.append(
        f"| async calls ({_get(enq, 'async', 'concurrency')} in flight), calls/s | "
        f"{_num(_get(enq, 'async', 'calls_per_s'))} | | |"
    )
    lines += [
        "",
        "## Accuracy (lateness ms: p50 / p99 / p99.9 / max)",
        "",
        "| due rate | jobs | entry - due | handler start - due | missing / dup / early | "
        "Redis cmds, CPU ms per 1k | scheduler CPU s |",
        "|---|---|---|---|---|---|---|",
    ]
    for a in res.get("accuracy", []):
        h = a.get("handled") or {}
        lines.append(
            f"| {_num(a['rate_per_s'])}/s | {_num(a['jobs'])} | {_lat(a['entry_lateness_ms'])} | "
            f"{_lat(h.get('handler_start_lateness_ms'))} | {a['missing']} / {a['duplicates']} / "
            f"{a['early']} | {_num(a['redis_commands_per_1000_fired'])}, "
            f"{a['redis_cpu_ms_per_1000_fired']} | {a['scheduler_cpu_s']} |"
        )
    burst = res.get("burst") or {}
    if burst:
        lines += [
            "",
            "## Burst",
            "",
            f"{_num(burst['jobs'])} jobs due at one instant: all in the stream after "
            f"{burst['all_in_stream_after_s']} s, every handler started after "
            f"{burst['all_handlers_started_after_s']} s (raw Lua firing limit: "
            f"{_num(lim.get('fire_jobs_per_s'))} jobs/s, raw XREADGROUP+XACK: "
            f"{_num(lim.get('consume_jobs_per_s'))} jobs/s).",
        ]
    burst_sync = res.get("burst_sync") or {}
    if burst_sync.get("all_handlers_started_after_s") is not None:
        lines += [
            "",
            f"With a sync handler (a ``def`` appending a line to a file), one worker process, "
            f"concurrency {burst_sync['concurrency']}: {_num(burst_sync['jobs'])} jobs due at one "
            f"instant, the first handler started {burst_sync['first_handler_started_after_ms']} ms "
            f"and the last {burst_sync['all_handlers_started_after_s']} s after due.",
        ]
    worker = res.get("worker") or {}
    if worker.get("jobs_per_s"):
        raw = lim.get("consume_jobs_per_s")
        lines += [
            "",
            "## Worker",
            "",
            f"One worker process, no-op async handler, concurrency {worker['concurrency']}: "
            f"{_num(worker['jobs_per_s'])} jobs/s ({worker['worker_cpu_us_per_job']} us of CPU "
            f"per job) draining {_num(worker['jobs'])} entries; raw XREADGROUP+XACK: "
            f"{_num(raw)} jobs/s ({_ratio(worker['jobs_per_s'], raw)}).",
        ]
    worker_sync = res.get("worker_sync") or {}
    if worker_sync.get("jobs_per_s"):
        lines += [
            "",
            f"One worker process, sync handler (a ``def`` appending a line to a file), "
            f"concurrency {worker_sync['concurrency']}: {_num(worker_sync['jobs_per_s'])} jobs/s "
            f"({worker_sync['worker_cpu_us_per_job']} us of CPU per job).",
        ]
    backlog = res.get("backlog") or {}
    if backlog:
        lines += [
            "",
            "## Backlog",
            "",
            f"{_num(backlog.get('backlog_jobs'))} pending jobs (100-byte payloads): "
            f"{backlog.get('redis_bytes_per_pending_job')} bytes of Redis memory each; "
            f"scheduler RSS {backlog.get('scheduler_rss_mb')} MB; at 10k/s with the backlog: "
            f"entry lateness {_lat(backlog.get('entry_lateness_ms'))} ms, handler start "
            f"{_lat(_get(backlog, 'handled', 'handler_start_lateness_ms'))} ms.",
        ]
    fo = res.get("failover") or {}
    if fo.get("fast") or fo.get("ttl"):
        lines += ["", "## Failover", "", "| | fast path | lease TTL only |", "|---|---|---|"]
        fast, ttl = fo.get("fast") or {}, fo.get("ttl") or {}

        def gaps(run: dict[str, Any]) -> str:
            found = [
                g.get("last_before_to_first_after_ms")
                for g in (run.get("gap_per_dead_shard") or {}).values()
            ]
            return ", ".join(_num(g) for g in found) or "-"

        for label, get in (
            ("jobs/s", lambda run: _num(run.get("rate_per_s"))),
            ("stream gap per dead shard, ms", gaps),
            ("lateness p99 (10 s around the kill), ms",
             lambda run: _num(_get(run, "around_kill", "lateness_ms", "p99"))),
            ("lateness max (10 s around the kill), ms",
             lambda run: _num(_get(run, "around_kill", "lateness_ms", "max"))),
            ("missing / duplicates", lambda run: f"{run.get('missing')} / {run.get('duplicates')}"),
        ):  # fmt: skip
            lines.append(f"| {label} | {get(fast)} | {get(ttl)} |")
        lines += ["", f"max lateness, fast ÷ TTL: {fo.get('max_lateness_ratio_fast_to_ttl')}"]
    lines += _efficiency(res) + _peers(res) + cluster_lines(res)
    return "\n".join(lines) + "\n"


def _efficiency(res: dict[str, Any]) -> list[str]:
    idle, eff, poller = res.get("idle") or {}, res.get("efficiency") or {}, res.get("poller") or {}
    if not (idle or eff or poller):
        return []
    p_idle, p_load = poller.get("idle") or {}, poller.get("loaded") or {}
    return [
        "",
        "## Efficiency: wheelq vs a 1-ms poller",
        "",
        "| | wheelq | 1-ms poller | poller / wheelq |",
        "|---|---|---|---|",
        _row(
            f"idle, {idle.get('topics')} topics x {idle.get('shards_per_topic')} shards: "
            "Redis commands/s",
            idle.get("redis_commands_per_s"),
            p_idle.get("commands_per_s"),
        ),
        _row(
            "idle: Redis CPU s per s",
            idle.get("redis_cpu_s_per_s"),
            p_idle.get("redis_cpu_s_per_s"),
            3,
        ),
        _row(
            "10k/s: Redis commands per 1k fired",
            eff.get("redis_commands_per_1000_fired"),
            p_load.get("commands_per_1000_jobs"),
        ),
        _row(
            "10k/s: Redis CPU ms per 1k fired",
            eff.get("redis_cpu_ms_per_1000_fired"),
            poller_cpu_ms_per_1000(p_load),
            2,
        ),
        f"| 10k/s: entry lateness p50 / p99 / p99.9 / max | {_lat(eff.get('entry_lateness_ms'))}"
        f" | {_lat(p_load.get('lateness_ms'))} | |",
    ]


def _peers(res: dict[str, Any]) -> list[str]:
    peers = res.get("peers") or {}
    if not peers:
        return []
    acc1k = next((a for a in res.get("accuracy", []) if a.get("rate_per_s") == 1000), {})
    ours_p50 = _get(acc1k, "handled", "handler_start_lateness_ms", "p50")
    ours_p99 = _get(acc1k, "handled", "handler_start_lateness_ms", "p99")
    ours_enq = _get(res, "enqueue", "single_sync", "calls_per_s")
    ours_burst = _get(res, "burst", "all_handlers_started_after_s")
    lines = [
        "",
        "## Peers (same machine, same Redis, same run)",
        "",
        f"wheelq: handler start - due at 1k/s p50 {_num(ours_p50, 1)} ms, p99 "
        f"{_num(ours_p99, 1)} ms; single enqueue {_num(ours_enq)} calls/s; burst of "
        f"{_num(_get(res, 'burst', 'jobs'))} all started after {ours_burst} s.",
        "",
        "| peer | setting | enqueue jobs/s (wheelq / peer) | handler start - due at 1k/s, "
        "p50 / p99 ms (peer / wheelq) | burst: all started after | not run in time / dup / early |",
        "|---|---|---|---|---|---|",
    ]
    for name, modes in peers.items():
        if not isinstance(modes, dict) or "error" in modes:
            why = modes.get("error") if isinstance(modes, dict) else modes
            lines.append(f"| {name} | error: {why} | | | | |")
            continue
        for mode, m in modes.items():
            if not isinstance(m, dict):
                continue
            if "error" in m:
                lines.append(f"| {name} | {mode}: error {m['error']} | | | | |")
                continue
            lat = _get(m, "accuracy", "handler_start_lateness_ms") or {}
            enq = _get(m, "enqueue", "jobs_per_s")
            lines.append(
                f"| {name} {m.get('version', '')} | {m.get('setting', mode)} | {_num(enq)} "
                f"({_ratio(ours_enq, enq)}) | {_num(lat.get('p50'), 0)} / {_num(lat.get('p99'), 0)}"
                f" ({_ratio(lat.get('p50'), ours_p50)} / {_ratio(lat.get('p99'), ours_p99)}) | "
                f"{_burst_cell(m.get('burst') or {})} | "
                f"{_get(m, 'accuracy', 'missing')} / {_get(m, 'accuracy', 'duplicates')} / "
                f"{_get(m, 'accuracy', 'early')} |"
            )
    return lines


def _burst_cell(b: dict[str, Any]) -> str:
    if b.get("all_started_s") is not None:
        return f"{b['all_started_s']} s ({_num(b.get('jobs'))} jobs)"
    return f"not all: {_num(b.get('handled'))} of {_num(b.get('jobs'))} by the deadline"


def plot(res: dict[str, Any], path: str) -> bool:
    """Lateness distributions (entry and handler start, per due rate) and the failover series;
    False when matplotlib is not installed (pip install -e '.[bench]')."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, axes = plt.subplots(1, 3, figsize=(18, 5))
    for a in res.get("accuracy", []):
        label = f"{int(a['rate_per_s']):,}/s"
        for ax, key in ((axes[0], "_entry_values"), (axes[1], "_handler_values")):
            values = sorted(a.get(key) or [])
            if values:
                n = len(values)
                ax.plot(values, [100 * (i + 1) / n for i in range(n)], label=label)
    for ax, title in (
        (axes[0], "stream entry - due (Redis clock)"),
        (axes[1], "handler start - due"),
    ):
        ax.set_xscale("symlog", linthresh=1)
        ax.set_xlabel("lateness, ms")
        ax.set_ylabel("% of jobs")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend()
    series = _get(res, "failover", "_series") or []
    if series:
        ttl_series = _get(res, "failover", "_series_ttl") or []
        axes[2].scatter([t for t, _ in ttl_series], [v for _, v in ttl_series], s=2, label="TTL")
        axes[2].scatter([t for t, _ in series], [v for _, v in series], s=2, label="fast path")
        axes[2].axvline(0, color="red", linewidth=1, label="kill -9")
        axes[2].set_xlabel("due time - kill, s")
        axes[2].set_ylabel("entry lateness, ms")
        axes[2].set_title("failover: lateness by due time")
        axes[2].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
