"""Everything that talks to Redis: Lua scripts, their wrappers, and how calls are sent."""
