"""The scheduler role: a node that leads shards and fires their jobs on time.

`scheduler.Scheduler` is the node; its parts, one service each: `lease_keeper`
(which shards it leads), `preloader` (near-due jobs into the wheel), `wheel_driver`
(fires what the wheel says is due), `wake_listener` (jobs written inside a preloaded
window), `trimmer` (acked stream entries) and `clock_keeper` (the offset to the Redis
clock). `led_shards` is the state they share.
"""
