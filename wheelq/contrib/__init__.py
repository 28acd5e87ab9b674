"""wheelq where Python apps live: a Django app (`wheelq.contrib.django`) and an ASGI
lifespan for FastAPI and Starlette (`wheelq.contrib.asgi`); docs/guides/tasks.md, "In
Django" and "In FastAPI and Starlette".
"""
