"""The scheduler role: a node that leads shards and fires their jobs on time.

`scheduler.Scheduler` is the node; its parts, one service each: `lease_keeper` (which
shards it leads), `preloader` (near-due jobs into the `wheel`, with the wake listener),
`wheel_driver` (fires what the wheel says is due), `trimmer` and `materializer`
(recurring schedules). `led_shards` is the state they share.
"""
