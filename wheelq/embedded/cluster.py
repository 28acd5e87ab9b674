"""A real Redis Cluster on loopback, from the same binaries as `EmbeddedServer`, formed
without ``redis-cli`` (ADDSLOTSRANGE, MEET, REPLICATE); three primaries take about 2 s.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import redis

from wheelq.embedded.server import EmbeddedServer, ServerBinary, Started
from wheelq.errors import EmbeddedServerError

SLOTS = 16_384
POLL_S = 0.05
MEET_AGAIN_S = 1.0  # a handshake that timed out (a loaded machine) is never tried again


class EmbeddedCluster(Started):
    """A cluster of `primaries` servers on 127.0.0.1, each with `replicas` replicas.

    `node_timeout_ms` is ``cluster-node-timeout`` (how long before a replica takes over);
    `extra_args` are more ``--option value`` arguments for every node.
    """

    def __init__(
        self,
        binary: ServerBinary | None = None,
        *,
        primaries: int = 3,
        replicas: int = 0,
        node_timeout_ms: int = 2000,
        appendonly: bool = False,
        extra_args: Sequence[str] = (),
    ) -> None:
        if primaries < 1 or replicas < 0:
            raise ValueError(f"need primaries >= 1 and replicas >= 0, got {primaries}, {replicas}")
        args = (
            "--cluster-enabled",
            "yes",
            "--cluster-node-timeout",
            str(node_timeout_ms),
            "--cluster-require-full-coverage",
            "no",
            "--repl-diskless-sync-delay",  # 5 s by default, for more replicas to join a sync
            "0",
            *extra_args,
        )

        def node() -> EmbeddedServer:
            return EmbeddedServer(binary, appendonly=appendonly, extra_args=args, cluster_bus=True)

        self.primaries = [node() for _ in range(primaries)]
        self.replicas = [node() for _ in range(primaries * replicas)]
        self._replicas_per_primary = replicas

    @property
    def nodes(self) -> list[EmbeddedServer]:
        """Every node, primaries first."""
        return self.primaries + self.replicas

    @property
    def url(self) -> str:
        """The URL of the first primary: any node's URL reaches the whole cluster."""
        return self.primaries[0].url

    def start(self, timeout_s: float = 30.0) -> None:
        """Start every node not running yet and form the cluster within `timeout_s`.

        Raises:
            EmbeddedServerError: The nodes did not start or form in time.
        """
        try:
            for node in self.nodes:
                if node.pid is None:
                    node.start()
            self._form(time.monotonic() + timeout_s)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop every node (safe to call twice)."""
        for node in self.nodes:
            node.stop()

    def kill_primary(self, index: int, timeout_s: float = 30.0) -> EmbeddedServer:
        """SIGKILL primary `index`; returns the replica that took over once every node sees it."""
        per = self._replicas_per_primary
        if per < 1:
            raise EmbeddedServerError("kill_primary needs replicas >= 1: none would take over")
        candidates = self.replicas[index * per : (index + 1) * per]
        ids = {id(node): self.node_id(node) for node in candidates}
        self.primaries[index].kill()
        live = [node for node in self.nodes if node.pid is not None]
        promoted: list[EmbeddedServer] = []

        def taken_over() -> bool:
            promoted[:] = [n for n in candidates if self._role(n) == "master"]
            return bool(promoted) and all(self._sees_primary(n, ids[id(promoted[0])]) for n in live)

        self._wait(time.monotonic() + timeout_s, "a replica to take over", taken_over)
        return promoted[0]

    def client(self, node: EmbeddedServer) -> redis.Redis:
        """A plain (non-cluster) client of one node, for admin commands in tests."""
        return redis.Redis(host=node.host, port=node.port, socket_timeout=5)

    # --- faults for tests: moving a slot, failing over -----------------------------------

    def node_id(self, node: EmbeddedServer) -> str:
        """A node's cluster id (CLUSTER MYID)."""
        with self.client(node) as c:
            return _text(c.execute_command("CLUSTER", "MYID"))

    def owner(self, slot: int) -> EmbeddedServer:
        """The primary serving `slot` now (as the first live primary's view has it)."""
        port = self._owner_seen_by(self._live_primary(), slot)
        if port is None:
            raise EmbeddedServerError(f"cluster: slot {slot} is not served")
        return next(n for n in self.nodes if n.port == port)

    def migrate_slot(
        self, slot: int, to: EmbeddedServer, *, pause_s: float = 0.0, timeout_s: float = 30.0
    ) -> int:
        """Move `slot` to primary `to` as an operator does; returns the keys moved.

        `pause_s` after each key lets a test's load meet the slot half moved (ASK, TRYAGAIN).
        """
        source = self.owner(slot)
        src_id, dst_id = self.node_id(source), self.node_id(to)
        with self.client(to) as dst, self.client(source) as src:
            dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
            src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
            moved = 0
            while keys := src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 1):
                src.execute_command("MIGRATE", to.host, to.port, "", 0, 5000, "KEYS", *keys)
                moved += len(keys)
                time.sleep(pause_s)
            for node in (to, source, *self.primaries):
                with self.client(node) as c:
                    c.execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
        self._wait(
            time.monotonic() + timeout_s,
            f"every node to see slot {slot} on {to.port}",
            lambda: all(self._owner_seen_by(n, slot) == to.port for n in self._live()),
        )
        return moved

    def failover(self, replica: EmbeddedServer, timeout_s: float = 30.0) -> EmbeddedServer:
        """CLUSTER FAILOVER on `replica`; returns the old primary once every node agrees."""
        with self.client(replica) as c:
            old = self._primary_of(c)
            c.execute_command("CLUSTER", "FAILOVER")
        self._settle(replica, old, timeout_s)
        return old

    def _settle(self, primary: EmbeddedServer, old: EmbeddedServer, timeout_s: float) -> None:

        def done() -> bool:
            with self.client(primary) as c:
                role = c.info("replication").get("role")
            return role == "master" and all(
                self._info(n).get("cluster_state") == "ok" for n in self._live()
            )

        self._wait(time.monotonic() + timeout_s, f"{primary.port} to be a primary", done)
        i, j = self.primaries.index(old), self.replicas.index(primary)
        self.primaries[i], self.replicas[j] = primary, old

    def _primary_of(self, replica: redis.Redis) -> EmbeddedServer:
        port = int(replica.info("replication")["master_port"])
        return next(n for n in self.nodes if n.port == port)

    def _owner_seen_by(self, node: EmbeddedServer, slot: int) -> int | None:
        with self.client(node) as c:
            for low, high, primary, *_ in c.execute_command("CLUSTER", "SLOTS"):
                if int(low) <= slot <= int(high):
                    return int(primary[1])
        return None

    def _live(self) -> list[EmbeddedServer]:
        return [n for n in self.nodes if n.pid is not None]

    def _live_primary(self) -> EmbeddedServer:
        return next(n for n in self.primaries if n.pid is not None)

    def _form(self, deadline: float) -> None:
        per = SLOTS // len(self.primaries)
        for i, node in enumerate(self.primaries):
            low = i * per
            high = SLOTS - 1 if i == len(self.primaries) - 1 else low + per - 1
            with self.client(node) as c:
                c.execute_command("CLUSTER", "ADDSLOTSRANGE", low, high)
        first = self.primaries[0]
        with self.client(first) as c:
            for node in self.nodes[1:]:
                c.execute_command("CLUSTER", "MEET", node.host, node.port, node.bus_port)
        self._wait(deadline, "every node to know every other", self._all_known, self._meet_missing)
        for i, replica in enumerate(self.replicas):
            primary = self.primaries[i // self._replicas_per_primary]
            primary_id = self.node_id(primary)
            with self.client(replica) as c:
                c.execute_command("CLUSTER", "REPLICATE", primary_id)
        self._wait(deadline, "cluster_state:ok on every node", self._all_ok)

    def _all_known(self) -> bool:
        # Not cluster_known_nodes: it counts nodes still in handshake.
        ports = {node.port for node in self.nodes}
        return all(self._known_ports(node) == ports for node in self.nodes)

    def _meet_missing(self) -> None:
        # A node drops a handshake with no answer within max(node timeout, 1 s), and Redis
        # 7.0 never meets again a node whose side of it timed out alone: the node that was
        # met knows the other, the other does not know it. MEET of a known node is a no-op.
        for node in self.nodes:
            known = self._known_ports(node)
            with self.client(node) as c:
                for other in self.nodes:
                    if other.port not in known:
                        c.execute_command("CLUSTER", "MEET", other.host, other.port, other.bus_port)

    def _known_ports(self, node: EmbeddedServer) -> set[int]:
        return {
            int(fields[1].split("@")[0].rsplit(":", 1)[1])
            for fields in self._cluster_nodes(node)
            if not {"handshake", "noaddr"} & set(fields[2].split(","))
        }

    def _all_ok(self) -> bool:
        # cluster_state is ok before a node has heard of every slot's owner (full coverage is
        # not required): wait until each has.
        return all(
            (info := self._info(node)).get("cluster_state") == "ok"
            and info.get("cluster_slots_assigned") == str(SLOTS)
            for node in self.nodes
        ) and all(self._replicating(node) for node in self.replicas)

    def _replicating(self, node: EmbeddedServer) -> bool:
        with self.client(node) as c:
            info = c.info("replication")
        return bool(info.get("role") == "slave" and info.get("master_link_status") == "up")

    def _role(self, node: EmbeddedServer) -> str:
        with self.client(node) as c:
            return str(c.info("replication").get("role"))

    def _sees_primary(self, node: EmbeddedServer, node_id: str) -> bool:
        return any(
            fields[0] == node_id and "master" in fields[2].split(",")
            for fields in self._cluster_nodes(node)
        )

    def _cluster_nodes(self, node: EmbeddedServer) -> list[list[str]]:
        """`node`'s CLUSTER NODES, a list of fields a node: id, ip:port@cport, flags, ..."""
        with self.client(node) as c:
            raw = _text(c.execute_command("CLUSTER", "NODES"))
        return [fields for line in raw.splitlines() if len(fields := line.split()) > 2]

    def _info(self, node: EmbeddedServer) -> dict[str, str]:
        with self.client(node) as c:
            raw = _text(c.execute_command("CLUSTER", "INFO"))
        return dict(line.split(":", 1) for line in raw.splitlines() if ":" in line)

    def _wait(
        self,
        deadline: float,
        what: str,
        done: Callable[[], bool],
        nudge: Callable[[], None] | None = None,
    ) -> None:
        """Poll `done` until `deadline`; call `nudge` every MEET_AGAIN_S while it is false."""
        nudged = time.monotonic()
        while not done():
            now = time.monotonic()
            if now > deadline:
                raise EmbeddedServerError(f"cluster: timed out waiting for {what}")
            if nudge is not None and now - nudged >= MEET_AGAIN_S:
                nudge()
                nudged = now
            time.sleep(POLL_S)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
