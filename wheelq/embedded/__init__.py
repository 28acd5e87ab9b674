"""The embedded server: a real Valkey or Redis process, or a cluster of them, on loopback.

`wheelq demo` and ``wheelq server`` run on it, and `wheelq.testing` re-exports it for
tests. It raises `wheelq.EmbeddedServerError` when no binary is found or a start fails.
"""

from wheelq.embedded.cluster import EmbeddedCluster
from wheelq.embedded.server import EmbeddedServer, ServerBinary, find_server_binaries, free_port

__all__ = ["EmbeddedCluster", "EmbeddedServer", "ServerBinary", "find_server_binaries", "free_port"]
