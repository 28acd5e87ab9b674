--[[ includes/pending.lua — a shard's pending jobs ({T:s}:delayed and {T:s}:jobs): wq_schedule
stores one and tells the leader when it falls in the preloaded window, wq_forget takes them
out, wq_note spells the inbox / wake note.
Includes: base
]]
-- Forget jobs (a table of ids): out of the shard's sorted set and its envelope hash.
local function wq_forget(delayed, jobs, ids)
  if #ids > 0 then
    wq_multi('ZREM', delayed, ids)
    wq_multi('HDEL', jobs, ids)
  end
end

-- An inbox / wake note: "due:id" (wheelq.core.parse_note reads it).
local function wq_note(due, id)
  return wq_fmt(due) .. ':' .. id
end

-- Store a job for later and, when its due time is inside the window the leader has already
-- preloaded (due <= horizon), tell the leader: the inbox list is the durable record, the
-- publish only makes the pick-up prompt.
local function wq_schedule(delayed, jobs, inbox, channel, horizon, id, due, envelope)
  redis.call('HSET', jobs, id, envelope)
  redis.call('ZADD', delayed, wq_fmt(due), id)
  if horizon and due <= horizon then
    local note = wq_note(due, id)
    redis.call('RPUSH', inbox, note)
    redis.call('SPUBLISH', channel, note)
  end
end
