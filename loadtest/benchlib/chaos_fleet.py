"""The chaos soak's processes: start, kill -9, stop and continue, and restart them by name.

Every process is `chaos_roles.py` run as a script, its stdout and stderr in
``OUT_DIR/NAME.out`` / ``OUT_DIR/NAME.log`` (appended across restarts). `Fleet.close`
kills whatever still runs, so nothing outlives the soak. A process is ready once it wrote
its pid to ``OUT_DIR/ready-NAME`` (its signal handlers are installed: `chaos_roles`); the
soak signals only ready processes, and an end it did not ask for is a death
(`Member.deaths`), which fails the soak.
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

from benchlib.chaos_roles import ready_path

READY_TIMEOUT_S = 30.0
"""How long a fault waits for its target to get ready (a start takes 1-2 s)."""
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

    def add(
        self,
        role: str,
        name: str,
        *args: str | dict[str, Any],
        url: str | None = None,
        topic: str | None = None,
    ) -> Member:
        """Start process `name` of `role`, connected to `url` (default the fleet's) for
        `topic` (default the fleet's); `args` follow (a dict as JSON)."""
        rest = [json.dumps(a) if isinstance(a, dict) else a for a in args]
        head = [role, url or self.url, topic or self.topic, name, str(self.out)]
        member = Member(name, role, [*head, *rest])
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
        ready_path(self.out, name).unlink(missing_ok=True)
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

    def ready(self, name: str) -> bool:
        """Whether `name`'s current process runs and has installed its signal handlers."""
        member = self.members[name]
        if member.proc is None or not member.alive():
            return False
        try:
            return ready_path(self.out, name).read_text() == str(member.proc.pid)
        except FileNotFoundError:
            return False

    def wait_ready(self, name: str, timeout_s: float = READY_TIMEOUT_S) -> bool:
        """Wait until `name` is `ready`; False at once when it is dead or stopped before it
        got there (it cannot get there), or after `timeout_s`."""
        member = self.members[name]
        deadline = time.monotonic() + timeout_s
        while not self.ready(name):
            if not member.alive() or member.stopped or time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
        return True

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

    def signal(self, name: str, sig: int, pid: int | None = None) -> bool:
        """Send `sig` to `name` (only to process `pid` when given: not to one started
        since); returns whether it was sent."""
        member = self.members[name]
        if not member.alive() or member.proc is None:
            return False
        if pid is not None and member.proc.pid != pid:
            return False
        os.kill(member.proc.pid, sig)
        return True

    def revive(self, roles: tuple[str, ...] = ()) -> list[str]:
        """Restart every member (of `roles`; empty: of every role) that died on its own (a
        crash point); returns their names."""
        revived = []
        for member in self.members.values():
            if roles and member.role not in roles:
                continue
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
        """SIGTERM every member of `role` (continuing a stopped one, once it is ready), wait
        up to `timeout_s`, kill -9 what is left; returns name -> return code. A member
        found dead already died on its own: that is one more of its `deaths`."""
        members = self.named(role)
        for member in members:
            if member.proc is not None and not member.alive():
                member.deaths.append(member.proc.returncode)
            self.resume(member.name)
            self.wait_ready(member.name)
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
