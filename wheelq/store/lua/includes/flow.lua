--[[ includes/flow.lua — flow control where jobs enter the streams (docs/architecture.md, "Flow
control"): wq_room, the room a shard's streams have under its "ready" limit, and wq_line_room,
the room its due line (includes/held.lua) may fill, and wq_fire_room, a producer's.
Includes: base
]]
-- What the slowest consumer group of `streams` has to catch up on: entries not yet delivered
-- to it plus, with `pending`, those delivered and not acked (a stream no group reads counts its
-- length); a group whose lag the server does not know (after deletions) is counted up to `most`.
local function wq_backlog(streams, pending, most)
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
          lag = #redis.call('XRANGE', stream, '(' .. g['last-delivered-id'], '+', 'COUNT', most)
        end
        if pending then
          lag = lag + g['pending']
        end
        backlog = math.max(backlog, lag)
      end
    end
  end
  return backlog
end

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
  return room - wq_backlog(streams, true, room)
end

-- How many more jobs may enter a shard's streams now from its due line (includes/held.lua):
-- its lead less the entries the slowest group has not been delivered yet, so that while jobs
-- wait on the line a stream holds about a lead of them in arrival order, and a job that goes
-- first on the line passes everything else; never more than the "ready" room (nil: none).
local function wq_line_room(line, room, streams)
  local lead_room = line.lead - wq_backlog(streams, false, line.lead)
  if room then
    return math.min(room, lead_room)
  end
  return lead_room
end

-- The room a shard's streams have for a job due now that a producer's call would fire at once
-- (enqueue, reschedule, debounce, a schedule's run; nil: no limit): none on a shard that
-- orders its due jobs (its limits hash has 'ordered' or 'fair'): the job is scheduled at its
-- due time and the leader puts it on the due line (includes/held.lua); else wq_room's.
local function wq_fire_room(limits, streams)
  local f = redis.call('HMGET', limits, 'ready', 'ordered', 'fair')
  if f[2] or f[3] then
    return 0
  end
  return wq_room(f[1], streams)
end
