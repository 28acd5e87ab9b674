"""Pure building blocks: no Redis, no asyncio, no environment, no clock reads."""
