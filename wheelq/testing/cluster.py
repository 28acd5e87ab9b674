"""A real Redis Cluster on loopback, from the same binaries as `EmbeddedServer`.

`EmbeddedCluster` starts `primaries` servers (and `replicas` replicas of each)
with ``--cluster-enabled yes``, spreads the 16,384 slots evenly over the
primaries with CLUSTER ADDSLOTSRANGE, joins the nodes with CLUSTER MEET,
attaches replicas with CLUSTER REPLICATE, and waits until every node reports
``cluster_state:ok`` and knows every other node. No ``redis-cli`` is needed;
three primaries take about two seconds. ``with`` starts and stops it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import TracebackType

import redis

from wheelq.errors import EmbeddedServerError
from wheelq.testing.binaries import ServerBinary
from wheelq.testing.embedded import EmbeddedServer, free_port

SLOTS = 16_384
POLL_S = 0.05


class EmbeddedCluster:
    """A cluster of Valkey or Redis servers on 127.0.0.1.

    Args:
        binary: The executable of every node; default as for `EmbeddedServer`.
        primaries: Primary nodes; the slots are split evenly between them.
        replicas: Replicas per primary (for failover tests).
        node_timeout_ms: ``cluster-node-timeout``: how long a node may be unreachable
            before the others mark it failed (and a replica takes over).
        appendonly: Turn on the AOF of every node.
    """

    def __init__(
        self,
        binary: ServerBinary | None = None,
        *,
        primaries: int = 3,
        replicas: int = 0,
        node_timeout_ms: int = 2000,
        appendonly: bool = False,
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
        )

        self._bus_ports: dict[int, int] = {}

        def node() -> EmbeddedServer:
            # The bus port defaults to port + 10000: past 65535 for a high free port.
            bus = free_port()
            server = EmbeddedServer(
                binary, appendonly=appendonly, extra_args=(*args, "--cluster-port", str(bus))
            )
            self._bus_ports[id(server)] = bus
            return server

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
        """Start every node and form the cluster.

        Raises:
            EmbeddedServerError: A node did not start, or the cluster did not become
                healthy within `timeout_s`.
        """
        try:
            for node in self.nodes:
                node.start()
            self._form(time.monotonic() + timeout_s)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop every node (safe to call twice)."""
        for node in self.nodes:
            node.stop()

    def client(self, node: EmbeddedServer) -> redis.Redis:
        """A plain (non-cluster) client of one node, for admin commands in tests."""
        return redis.Redis(host=node.host, port=node.port, socket_timeout=5)

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
                bus = self._bus_ports[id(node)]
                c.execute_command("CLUSTER", "MEET", node.host, node.port, bus)
        self._wait(deadline, "every node to know every other", self._all_known)
        for i, replica in enumerate(self.replicas):
            primary = self.primaries[i // self._replicas_per_primary]
            with self.client(primary) as c:
                primary_id = _text(c.execute_command("CLUSTER", "MYID"))
            with self.client(replica) as c:
                c.execute_command("CLUSTER", "REPLICATE", primary_id)
        self._wait(deadline, "cluster_state:ok on every node", self._all_ok)

    def _all_known(self) -> bool:
        return all(
            self._info(node).get("cluster_known_nodes") == str(len(self.nodes))
            for node in self.nodes
        )

    def _all_ok(self) -> bool:
        return all(self._info(node).get("cluster_state") == "ok" for node in self.nodes) and all(
            self._replicating(node) for node in self.replicas
        )

    def _replicating(self, node: EmbeddedServer) -> bool:
        with self.client(node) as c:
            info = c.info("replication")
        return bool(info.get("role") == "slave" and info.get("master_link_status") == "up")

    def _info(self, node: EmbeddedServer) -> dict[str, str]:
        with self.client(node) as c:
            raw = _text(c.execute_command("CLUSTER", "INFO"))
        return dict(line.split(":", 1) for line in raw.splitlines() if ":" in line)

    def _wait(self, deadline: float, what: str, done: Callable[[], bool]) -> None:
        while not done():
            if time.monotonic() > deadline:
                raise EmbeddedServerError(f"cluster: timed out waiting for {what}")
            time.sleep(POLL_S)

    def __enter__(self) -> EmbeddedCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
