"""The chaos soak's processes: start, kill -9, stop and continue, and restart them by name.

Every process is `chaos_roles.py` run as a script, its stdout and stderr in
``OUT_DIR/NAME.out`` / ``OUT_DIR/NAME.log`` (appended across restarts). `Fleet.close`
kills whatever still runs, so nothing outlives the soak.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "chaos_roles.py")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclass
class Member:
    """One named process of the fleet and how to start it again."""

    name: str
    role: str
    args: list[str]
    proc: subprocess.Popen[bytes] | None = None
    stopped: bool = False
    """SIGSTOPped and not continued yet."""
    starts: int = 0
    deaths: list[int] = field(default_factory=list)
    """The return codes of its ends not asked for (-9: a crash point or a kill -9)."""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class Fleet:
    """Named role processes, all connected to `url`."""

    def __init__(self, url: str, topic: str, out: Path) -> None:
        self.url, self.topic, self.out = url, topic, out
        self.members: dict[str, Member] = {}

    def add(self, role: str, name: str, *args: str | dict[str, Any]) -> Member:
        rest = [json.dumps(a) if isinstance(a, dict) else a for a in args]
        member = Member(name, role, [role, self.url, self.topic, name, str(self.out), *rest])
        self.members[name] = member
        self.start(name)
        return member

    def named(self, role: str) -> list[Member]:
        return [m for m in self.members.values() if m.role == role]

    def start(self, name: str, crash_at: str | None = None) -> None:
        """(Re)start `name`; `crash_at` arms crash points in it (``point:hits``)."""
        member = self.members[name]
        if member.alive():
            raise RuntimeError(f"{name} still runs")
        env = dict(os.environ)
        env.pop("WHEELQ_CRASH_AT", None)
        if crash_at:
            env["WHEELQ_CRASH_AT"] = crash_at
        with (
            (self.out / f"{name}.out").open("ab") as out,
            (self.out / f"{name}.log").open("ab") as log,
        ):
            member.proc = subprocess.Popen(
                [sys.executable, ROLES, *member.args], cwd=ROOT, stdout=out, stderr=log, env=env
            )
        member.starts += 1
        member.stopped = False

    def kill(self, name: str) -> None:
        """kill -9, and wait for it."""
        member = self.members[name]
        if member.proc is not None and member.alive():
            member.proc.kill()
            member.proc.wait()
        member.stopped = False

    def pause(self, name: str) -> None:
        member = self.members[name]
        if member.alive() and member.proc is not None:
            os.kill(member.proc.pid, signal.SIGSTOP)
            member.stopped = True

    def resume(self, name: str) -> None:
        member = self.members[name]
        if member.alive() and member.proc is not None:
            os.kill(member.proc.pid, signal.SIGCONT)
        member.stopped = False

    def signal(self, name: str, sig: int) -> None:
        member = self.members[name]
        if member.alive() and member.proc is not None:
            os.kill(member.proc.pid, sig)

    def revive(self) -> list[str]:
        """Restart every member that died on its own (a crash point); returns their names."""
        revived = []
        for member in self.members.values():
            if member.proc is not None and not member.alive():
                member.deaths.append(member.proc.returncode)
                self.start(member.name)
                revived.append(member.name)
        return revived

    def wait_dead(self, name: str, timeout_s: float) -> bool:
        """Wait until `name` exits; True when it did."""
        member = self.members[name]
        deadline = time.monotonic() + timeout_s
        while member.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        return not member.alive()

    def stop(self, role: str, timeout_s: float) -> dict[str, Any]:
        """SIGTERM every member of `role` (continuing a stopped one), wait up to `timeout_s`,
        kill -9 what is left; returns name -> return code."""
        members = self.named(role)
        for member in members:
            self.resume(member.name)
            self.signal(member.name, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        codes: dict[str, Any] = {}
        for member in members:
            assert member.proc is not None
            try:
                codes[member.name] = member.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                member.proc.kill()
                codes[member.name] = f"killed after {timeout_s} s: {member.proc.wait()}"
        return codes

    def close(self) -> None:
        for member in self.members.values():
            if member.proc is not None and member.alive():
                os.kill(member.proc.pid, signal.SIGCONT)
                member.proc.kill()
                member.proc.wait()
