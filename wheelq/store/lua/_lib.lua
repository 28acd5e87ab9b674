--[[ _lib.lua — helpers prepended to every wheelq script by wheelq.store.scripts.
Status codes shared by all scripts (first element of the reply):
   0 ok   -1 wrong type (second element: the key)   -2 lease not held by the caller
Numbers are written with '%.0f': Lua's tostring() turns 13-digit ms into exponent notation.
]]
local function wq_fmt(n)
  return string.format('%.0f', n)
end

-- The Redis server's clock in ms: the one clock due times live on.
local function wq_now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Name of the first key whose type is neither absent nor the expected one.
-- Called before the first write, so a script never fails half-way.
local function wq_bad_type(...)
  local a = {...}
  for i = 1, #a, 2 do
    local t = redis.call('TYPE', a[i])['ok']
    if t ~= 'none' and t ~= a[i + 1] then
      return a[i]
    end
  end
  return nil
end

-- XADD a job to the ready stream from its envelope [1, payload, attempt, max_attempts, enqueued_ms].
local function wq_fire(ready, topic, id, due, envelope)
  local env = cmsgpack.unpack(envelope)
  return redis.call('XADD', ready, '*', 'id', id, 'topic', topic, 'due', wq_fmt(due),
    'attempt', wq_fmt(env[3]), 'max_attempts', wq_fmt(env[4]), 'payload', env[2])
end

-- Store a job for later and, when its due time is inside the window the leader has already
-- preloaded (due <= horizon), tell the leader: the inbox list is the durable record, the
-- publish only makes the pick-up prompt.
local function wq_schedule(delayed, jobs, inbox, channel, horizon, id, due, envelope)
  redis.call('HSET', jobs, id, envelope)
  redis.call('ZADD', delayed, wq_fmt(due), id)
  if horizon and due <= horizon then
    local note = wq_fmt(due) .. ':' .. id
    redis.call('RPUSH', inbox, note)
    redis.call('PUBLISH', channel, note)
  end
end
