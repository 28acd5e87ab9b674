"""Where a far job's Redis CPU goes: `enqueue_many` into the sorted set and into the far tier,
against a `redis-server` run under valgrind's callgrind; prints the instructions per job of
each, their ratio, and for the far tier the server functions that take the most (inclusive,
per job) as JSON; then the id codec alone (`CODEC`), in instructions an id.

    python loadtest/far_profile.py [--jobs 4000] [--out far-profile.json]

Each side first writes `--jobs` jobs not counted (the keys at their working size: the far
tier's leaves and index hashes exist), then `--jobs` more counted: the hot ones due over the
next half hour, the far ones over a day a month ahead, 80-byte payloads, generated ids, as
`bulk_enqueue.py --far` writes them. Instructions, not seconds: they move by well under 1%
between runs on a shared machine (`redis_cost.py`). The server's Lua interpreter is
stripped in distributions' builds, so the script's own Lua shows as unnamed addresses: the
named rows are Redis commands the script calls, SHA1 and Lua's string functions, and what
they leave is the interpreter.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from wheelq import Admin, Client, EnqueueItem
from wheelq.core.ids import make_job_id
from wheelq.store.scripts import compose

PAYLOAD = b"x" * 80
SHARDS = 4
TOP = 14
NAMED = re.compile(r"^\s*([\d,]+) \([ \d.]+%\)\s+\?\?\?:([A-Za-z_]\w*) ")
"""A callgrind_annotate row of a named server function: its instructions and its name."""


def items(far: bool, jobs: int, offset: int) -> list[EnqueueItem]:
    if far:  # over a day, a month ahead: every one into the far tier (an hour's horizon)
        return [
            EnqueueItem(payload=PAYLOAD, delay=30 * 86400 + (i + offset) * 86400 / (2 * jobs))
            for i in range(jobs)
        ]
    return [
        EnqueueItem(payload=PAYLOAD, delay=600 + (i + offset) * 1800 / (2 * jobs))
        for i in range(jobs)
    ]


CODEC = {
    side: compose("codec.lua", f"--[[ codec.lua: far_profile's\nIncludes: ids\n]]\n{body}")
    for side, body in {
        "id_bytes": """local bytes = wq_id_codec()
local n = 0
for _, id in ipairs(ARGV) do
  n = n + (bytes(id) and 1 or 0)
end
return n""",
        "id_bytes_and_text": """local bytes, text = wq_id_codec()
local n = 0
for _, id in ipairs(ARGV) do
  n = n + (text(bytes(id)) == id and 1 or 0)
end
return n""",
    }.items()
}
"""The id codec (`includes/ids.lua`) alone: `--jobs` generated ids encoded, and encoded and
decoded, in one EVALSHA each (a far job's record and a key index entry hold ids so)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def profile(server: str, jobs: int, tmp: Path) -> dict[str, Path]:
    """Run both sides against one server under callgrind; the dump of each side."""
    port = free_port()
    out = tmp / "callgrind.out"
    argv = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}.%p"]
    proc = subprocess.Popen(
        [*argv, server, "--port", str(port), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    control = ["callgrind_control"]
    dumps: dict[str, Path] = {}
    try:
        probe = redis.Redis(port=port)
        deadline = time.monotonic() + 120
        while True:
            try:
                probe.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit(f"{server} under valgrind did not start") from None
                time.sleep(0.2)
        with Client.from_url(f"redis://127.0.0.1:{port}") as client:
            for n, (side, far) in enumerate((("hot", False), ("far", True)), start=1):
                Admin.of(client).create_topic(side, SHARDS)
                client.enqueue_many(side, items(far, jobs, 0))
                subprocess.run([*control, "-z", str(proc.pid)], check=True, capture_output=True)
                client.enqueue_many(side, items(far, jobs, jobs))
                subprocess.run(
                    [*control, "-d", side, str(proc.pid)], check=True, capture_output=True
                )
                dumps[side] = Path(f"{out}.{proc.pid}.{n}")
        ids = [make_job_id(int(time.time() * 1000), os.urandom(10)) for _ in range(jobs)]
        for n, (side, script) in enumerate(CODEC.items(), start=3):
            sha = probe.script_load(script)
            probe.evalsha(sha, 0, *ids[:10])  # warm
            subprocess.run([*control, "-z", str(proc.pid)], check=True, capture_output=True)
            assert probe.evalsha(sha, 0, *ids) == jobs
            subprocess.run([*control, "-d", side, str(proc.pid)], check=True, capture_output=True)
            dumps[side] = Path(f"{out}.{proc.pid}.{n}")
        probe.shutdown(nosave=True)
    except redis.ConnectionError:
        pass  # the shutdown's own reply
    finally:
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:  # a run that failed before the shutdown: no orphan
            proc.kill()
            proc.wait()
    return dumps


def annotate(dump: Path) -> list[tuple[str, int]]:
    """(function, inclusive instructions) of the named server functions, most first."""
    text = subprocess.run(
        ["callgrind_annotate", "--inclusive=yes", str(dump)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    rows: list[tuple[str, int]] = []
    for line in text.splitlines():
        if match := NAMED.match(line):
            rows.append((match.group(2), int(match.group(1).replace(",", ""))))
    return rows


def total(dump: Path) -> int:
    for line in dump.read_text(errors="replace").splitlines():
        if line.startswith("summary:") or line.startswith("totals:"):
            return int(line.split()[1])
    raise SystemExit(f"no totals in {dump}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=4000)
    p.add_argument("--server", default=shutil.which("redis-server") or "redis-server")
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    if not shutil.which("valgrind"):
        raise SystemExit("needs valgrind (apt-get install valgrind)")
    version = subprocess.run(
        [args.server, "--version"], check=True, capture_output=True, text=True
    ).stdout
    with tempfile.TemporaryDirectory() as tmp:
        dumps = profile(args.server, args.jobs, Path(tmp))
        per_job = {side: total(dump) / args.jobs for side, dump in dumps.items()}
        # The path every command takes (reading the query, dispatching it, the EVALSHA and
        # its Lua call): inclusive of everything, so not where the time goes.
        skip = {"main", "aeMain", "readQueryFromClient", "processInputBuffer", "processCommand"}
        skip |= {"call", "evalShaCommand"}
        rows = [
            {
                "function": name,
                "per_job": round(n / args.jobs),
                "share": round(n / total(dumps["far"]), 3),
            }
            for name, n in annotate(dumps["far"])
            if name not in skip and not name.startswith(("eval", "lua_pcall", "luaCall"))
        ]
    result: dict[str, Any] = {
        "server": version.strip(),
        "jobs": args.jobs,
        "instructions_per_job": {side: round(per_job[side]) for side in ("hot", "far")},
        "far_to_hot": round(per_job["far"] / per_job["hot"], 2),
        "id_codec_instructions_per_id": {
            "bytes": round(per_job["id_bytes"]),
            "bytes_and_text": round(per_job["id_bytes_and_text"]),
        },
        "far_top_functions": rows[:TOP],
    }
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    sys.exit(main())
