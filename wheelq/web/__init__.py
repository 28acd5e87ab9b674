"""The HTTP service (`wheelq serve`): the JSON API, pull consumers, the dashboard.

An ASGI app (FastAPI) over one `wheelq.AsyncClient`, optionally running the callback
deliverer beside it (`wheelq.callbacks`). See README, "HTTP service".
"""
