"""The worker role: runs a handler on every job of a topic for one consumer group.

`worker.Worker` wires the parts: `stream_reader` (XREADGROUP), `in_flight` (the entries
held and their slots), `handler_runner` and `handler_threads` (running user code),
`settler` (acks, retries, dead letters), `claim_keeper` (keep-alive and take-over) and
`membership` (joining and leaving the group).
"""
