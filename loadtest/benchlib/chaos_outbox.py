"""The chaos soak's outbox: a PostgreSQL of the soak's own with the outbox's tables, a
producer committing jobs into it and two relays placing them in Redis (processes of
`chaos_roles`), the outbox's fault classes, and what it holds at the end for the account
(`chaos_report.reconcile_outbox`).

Each relay reaches Redis through a proxy of its own in front of the soak's proxy, so the
soak's faults reach it and a fault can hold one relay's bytes; it connects as the ACL user
`RELAY_USER` (made by `server_args` at the server's start, so a restart keeps it), so a
fault can refuse one shard's keys to the relays alone. On a cluster the relays connect
directly, as the other roles do, without those two faults. The faults (`Outbox.faults`):

- ``relay_stop``: a relay SIGSTOPped past its ``idle_in_transaction_ms``, then continued;
- ``relay_path_stall``: a relay's proxy holds its bytes past that, then lets them through;
- ``relay_crash_point``: a relay killed between Redis taking a batch and its commit;
- ``outbox_poison``: rows written by plain SQL that no relay may place (`POISON`);
- ``outbox_replace_race``: `RACE_VERSIONS` committed versions (``replace=True``) of each of
  `RACE_IDS` ids, back to back, for the two relays to race;
- ``outbox_shard_error``: one shard of the topic refused to the relays (NOPERM), so their
  write fails for that shard alone.
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import psycopg
import redis

from benchlib.chaos_faults import Arena, Event, Fault, crash_point, pause
from benchlib.chaos_fleet import ROOT, Fleet
from benchlib.chaos_roles import Log, read_log, replace_delay_s
from wheelq import Admin, outbox
from wheelq.core.job import Field
from wheelq.core.keys import all_shards
from wheelq.core.payload import decode_payload
from wheelq.outbox.enqueue import INSERT, row
from wheelq.testing import Fired
from wheelq.testing.proxy import ProxyThread

SHARDS = 4
RELAYS = 2
IDLE_IN_TRANSACTION_S = 2.0
RELAY_SETTINGS = {
    "idle_in_transaction_ms": int(IDLE_IN_TRANSACTION_S * 1000),
    "sweep_ms": 500,
    "batch_size": 100,
}
RELAY_USER = "relay"
RELAY_PASSWORD = "chaos-relay"  # a loopback server of the soak's own
RACE_IDS = 60
RACE_VERSIONS = 4
POISON = (
    "invalid_topic",
    "undecodable_envelope",
    "empty_id",
    "long_id",
    "far_due",
    "negative_delay",
)
"""The rows `outbox_poison` writes, one of each: every one belongs in wheelq_outbox_rejected."""
FAULT_NAMES = (
    "relay_stop",
    "relay_path_stall",
    "relay_crash_point",
    "outbox_poison",
    "outbox_replace_race",
    "outbox_shard_error",
)
"""`Outbox.faults`' classes, for the soak to check `--exclude` against."""
ONLY_WITH_PATHS = ("relay_path_stall", "outbox_shard_error")
"""Faults that need the relays' own proxies and ACL user (none on a cluster)."""


def server_args() -> tuple[str, ...]:
    """The Redis server's arguments that make the relays' ACL user, allowed everything."""
    return ("--user", RELAY_USER, "on", f">{RELAY_PASSWORD}", "~*", "&*", "+@all")


def keys_but(prefix: str) -> list[str]:
    """Glob patterns (Redis's) that match every key name but those starting with `prefix`."""
    patterns = []
    for i, char in enumerate(prefix):
        head = re.sub(r"([*?\[\]\\])", r"\\\1", prefix[:i])
        patterns.append(f"{head}[^\\{char}]*")
        if i:
            patterns.append(head)  # exactly the shorter name
    return patterns


class Outbox:
    """The outbox beside the soak's topic: ``with`` it (the relays' proxies), `start` it,
    inject its `faults`, `heal` and `drain` it, then read what it holds for the account:
    `records`, `poison`, `fired`, `rejected`, `rows_left`."""

    def __init__(
        self, dsn: str, topic: str, target: Any, proxy: ProxyThread, out: Path, cluster: bool
    ) -> None:
        self.dsn, self.topic, self.target, self.out = dsn, topic, target, out
        self.cluster = cluster
        self.paths: dict[str, ProxyThread] = {}
        if not cluster:
            self.paths = {f"r{i}": ProxyThread(proxy.port) for i in range(RELAYS)}
        self._races = 0
        self._poisoned = 0

    def __enter__(self) -> Outbox:
        for path in self.paths.values():
            path.__enter__()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for path in self.paths.values():
            path.__exit__(kind, exc, tb)

    def start(self, fleet: Fleet, rate: float) -> None:
        """``wheelq outbox init``, the topic, then the producer and the relays."""
        init = [sys.executable, "-m", "wheelq", "outbox", "init", "--dsn", self.dsn]
        done = subprocess.run(init, cwd=ROOT, capture_output=True, text=True, check=False)
        if done.returncode:
            raise RuntimeError(f"wheelq outbox init failed: {done.stdout}{done.stderr}")
        with Admin.from_url(self.target.url) as admin:
            admin.create_topic(self.topic, shards=SHARDS)
        fleet.add("outbox_producer", "op0", self.dsn, str(rate), topic=self.topic)
        for i in range(RELAYS):
            name = f"r{i}"
            fleet.add("relay", name, self.dsn, RELAY_SETTINGS, url=self._url(name))

    def _url(self, name: str) -> str:
        if self.cluster:
            return str(self.target.url)
        return f"redis://{RELAY_USER}:{RELAY_PASSWORD}@127.0.0.1:{self.paths[name].port}"

    def faults(self) -> dict[str, Fault]:
        idle = IDLE_IN_TRANSACTION_S
        found: dict[str, Fault] = {
            "relay_stop": pause("relay", idle + 0.5, idle + 4.0),
            "relay_path_stall": self._path_stall,
            "relay_crash_point": crash_point("relay", ("relay.after_place",)),
            "outbox_poison": self._poison,
            "outbox_replace_race": self._replace_race,
            "outbox_shard_error": self._shard_error,
        }
        assert tuple(found) == FAULT_NAMES
        if self.cluster:
            found = {name: f for name, f in found.items() if name not in ONLY_WITH_PATHS}
        return found

    def _path_stall(self, arena: Arena, rng: random.Random, event: Event) -> Iterator[float]:
        name = rng.choice(sorted(self.paths))
        event.detail["target"] = name
        self.paths[name].stall()
        # past its socket timeout (2 s) and idle_in_transaction_ms, and past the other relay
        # placing the same rows and committing: then the held write arrives
        yield rng.uniform(IDLE_IN_TRANSACTION_S + 2.0, IDLE_IN_TRANSACTION_S + 5.0)
        self.paths[name].unstall()

    def _poison(self, arena: Arena, rng: random.Random, event: Event) -> Iterator[float]:
        self._poisoned += 1
        tag = f"poison-{self._poisoned}"
        written = []
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            for kind, values in poison_rows(self.topic, tag).items():
                found = conn.execute(INSERT + " RETURNING seq", values).fetchone()
                assert found is not None
                written.append(f"P {found[0]} {kind}")
        Log(self.out / "outbox-poison.log").write(written)
        event.detail["rows"] = [line.split(" ", 1)[1] for line in written]
        yield 0.0

    def _replace_race(self, arena: Arena, rng: random.Random, event: Event) -> Iterator[float]:
        self._races += 1
        ids = [f"race{self._races}-{i}" for i in range(RACE_IDS)]
        records = Log(self.out / "outbox-jobs-race.log")
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            for version in range(1, RACE_VERSIONS + 1):
                with conn.transaction():
                    for job_id in ids:
                        outbox.enqueue(
                            conn, self.topic, [job_id, version], job_id=job_id, replace=True,
                            delay=replace_delay_s(version),
                        )  # fmt: skip
                ended_ms = int(time.time() * 1000)
                records.write([f"C {job_id} {version} {ended_ms}" for job_id in ids])
        event.detail["ids"] = f"{ids[0]}..{ids[-1]} x {RACE_VERSIONS} versions"
        yield 0.0

    def _shard_error(self, arena: Arena, rng: random.Random, event: Event) -> Iterator[float]:
        keys = rng.choice(all_shards(self.topic, SHARDS))
        prefix = keys.delayed[: keys.delayed.index("}") + 1]
        event.detail["shard"] = keys.shard
        if failed := self._allow_keys([f"~{p}" for p in keys_but(prefix)]):
            event.detail["not_applied"] = failed
        yield rng.uniform(1.5, 4.0)
        if failed := self._allow_keys(["~*"]):  # a restart meanwhile allowed every key
            event.detail["not_restored"] = failed

    def _allow_keys(self, patterns: list[str]) -> list[str]:
        """Allow the relays' user the keys of `patterns` alone; the errors met."""
        failed = []
        for conn in self.target.primaries():
            try:
                conn.execute_command("ACL", "SETUSER", RELAY_USER, "resetkeys", *patterns)
            except redis.RedisError as exc:
                failed.append(repr(exc))
            finally:
                conn.close()
        return failed

    def heal(self, log: Callable[[str], None]) -> None:
        """Every relay's path flowing, every key allowed to the relays."""
        for path in self.paths.values():
            path.unstall()
        if not self.cluster and (failed := self._allow_keys(["~*"])):
            log(f"outbox heal: the relays' keys not restored: {failed}")

    def drain(self, direct: Any, log: Callable[[str], None], deadline: float) -> bool:
        """Wait until the table is empty and no committed job is pending in Redis (every one
        placed and fired); False when that did not happen by `deadline` (monotonic s)."""
        left: dict[str, int] = {}
        while time.monotonic() < deadline:
            committed = {r[1] for r in self.records() if r[0] == "C"}
            pending = set()
            for keys in all_shards(self.topic, SHARDS):
                pending |= {m.decode() for m in direct.zrange(keys.delayed, 0, -1)}
            left = {"rows": self.rows_left(), "pending": len(committed & pending)}
            if not any(left.values()):
                log("outbox drained: no row left, no committed job pending")
                return True
            time.sleep(0.5)
        log(f"outbox did not drain: {left}")
        return False

    def records(self) -> list[tuple[str, str, int]]:
        """Every job the producer and the races wrote: (outcome, id, version), in order."""
        out = []
        for path in sorted(self.out.glob("outbox-jobs-*.log")):
            out += [_split(line) for line in read_log(path)]
        return out

    def poison(self) -> dict[int, str]:
        """seq -> kind of every poison row written."""
        lines = read_log(self.out / "outbox-poison.log")
        return {int(seq): kind for _, seq, kind in (line.split(" ") for line in lines)}

    def rows_left(self) -> int:
        with psycopg.connect(self.dsn) as conn:
            found = conn.execute("SELECT count(*) FROM wheelq_outbox").fetchone()
        return int(found[0]) if found else 0

    def rejected(self) -> list[int]:
        with psycopg.connect(self.dsn) as conn:
            return [int(r[0]) for r in conn.execute("SELECT seq FROM wheelq_outbox_rejected")]

    def fired(self, direct: Any) -> list[tuple[Fired, Any]]:
        """Every entry of the topic's ready streams, with its payload decoded."""
        out = []
        for keys in all_shards(self.topic, SHARDS):
            for entry_id, fields in direct.xrange(keys.ready, "-", "+"):
                try:
                    payload = decode_payload(fields[Field.PAYLOAD])
                except Exception as exc:  # an undecodable envelope placed as it was
                    payload = f"undecodable: {exc!r}"
                out.append((Fired.from_entry(entry_id, fields), payload))
        return out


def _split(line: str) -> tuple[str, str, int]:
    """``outcome job_id version ms`` (a job id has no space: the producer's and the races')."""
    outcome, job_id, version, _ = line.split(" ")
    return outcome, job_id, int(version)


def write_fired(path: Path, fired: list[tuple[Fired, Any]]) -> None:
    """``job_id attempt due_ms entry_ms payload`` per entry, to look into a failed account."""
    lines = [
        f"{f.job_id} {f.attempt} {f.due_ms} {f.entry_ms} {json.dumps(payload, default=repr)}"
        for f, payload in fired
    ]
    path.write_text("".join(line + "\n" for line in lines))


def poison_rows(topic: str, tag: str) -> dict[str, dict[str, Any]]:
    """One row of each `POISON` kind, as a writer other than `enqueue` could: a valid row of
    `topic` with one column spoiled."""
    rows = {
        kind: row(topic, [tag, kind], None, {"job_id": f"{tag}-{kind}", "delay": 1.0})
        for kind in POISON
    }
    rows["invalid_topic"]["topic"] = "not a topic!"
    rows["undecodable_envelope"]["envelope"] = b"\xc1\xc1\xc1"
    rows["empty_id"]["job_id"] = ""
    rows["long_id"]["job_id"] = f"{tag}-long-".ljust(300, "x")
    rows["far_due"].update(mode="a", value_ms=9 * 10**18)
    rows["negative_delay"].update(mode="d", value_ms=-5000)
    return rows
