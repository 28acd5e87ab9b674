"""An ASGI app's lifespan (FastAPI, Starlette) that opens a `wheelq.App`'s clients on the
server's loop and closes them at shutdown (docs/guides/tasks.md, "In FastAPI and
Starlette").
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from wheelq.tasks.app import App


def lifespan(app: App) -> Callable[[object], AbstractAsyncContextManager[None]]:
    """A lifespan for ``FastAPI(lifespan=...)`` or ``Starlette(lifespan=...)``: at startup
    it makes `app`'s asyncio client on the server's loop (the one ``await
    task.aenqueue_in(...)`` in a route then uses); at shutdown it closes that client and
    the blocking one sync routes used. With a lifespan of your own, enter the app there
    instead: ``async with app: yield``.
    """

    @asynccontextmanager
    async def span(_asgi_app: object) -> AsyncIterator[None]:
        async with app:
            yield

    return span
