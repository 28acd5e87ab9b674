"""The embedded server: a real Valkey or Redis process, or a cluster of them, on loopback
(`wheelq demo`, ``wheelq server``, and `wheelq.testing` for tests).
"""

from wheelq.embedded.cluster import EmbeddedCluster
from wheelq.embedded.server import EmbeddedServer, ServerBinary, find_server_binaries, free_port

__all__ = ["EmbeddedCluster", "EmbeddedServer", "ServerBinary", "find_server_binaries", "free_port"]
