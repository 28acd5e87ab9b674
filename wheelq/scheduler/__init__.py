"""The scheduler role: a node that leads shards and fires their jobs on time."""
