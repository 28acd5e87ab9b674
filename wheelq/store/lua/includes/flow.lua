--[[ includes/flow.lua — flow control where jobs enter the streams (docs/architecture.md, "Flow
control"): wq_room, the room a shard's streams have under its "ready" limit.
Includes: base
]]
-- How many more jobs may fire into a shard's streams now under its "ready" limit (`limit`,
-- the "ready" field of its limits hash as read, wheelq.core.flow): the limit less what the
-- slowest consumer group of the streams has to catch up on (unacked + not yet read; a stream
-- no group reads counts its length). nil when the shard has no such limit. Every path into a
-- stream asks it, so the limit holds for enqueue, reschedule, debounce, schedules, replay and
-- emit: a job due now that finds no room waits in the sorted set, and the leader emits it as
-- workers catch up.
local function wq_room(limit, streams)
  if not limit then
    return nil
  end
  local room = tonumber(limit)
  local backlog = 0
  for _, stream in ipairs(streams) do
    if redis.call('EXISTS', stream) == 1 then
      local groups = redis.call('XINFO', 'GROUPS', stream)
      if #groups == 0 then
        backlog = math.max(backlog, redis.call('XLEN', stream))
      end
      for _, flat in ipairs(groups) do
        local g = wq_fields(flat)
        local lag = tonumber(g['lag'])
        if not lag then -- unknown to the server (after deletions): count, up to the limit
          lag = #redis.call('XRANGE', stream, '(' .. g['last-delivered-id'], '+', 'COUNT', room)
        end
        backlog = math.max(backlog, g['pending'] + lag)
      end
    end
  end
  return room - backlog
end
