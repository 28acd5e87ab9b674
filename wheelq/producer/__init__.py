"""The producer role: the clients that enqueue, cancel, reschedule and inspect jobs.

`Client` (blocking) and `AsyncClient` (asyncio) in `client`; what they send is written
once, sans-I/O, in `operations` (jobs) and `dead_letters`; `encode_batch` is what one
call's items share while they are validated and packed.
"""
