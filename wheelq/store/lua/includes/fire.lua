--[[ includes/fire.lua — firing a job: wq_fire writes its ready-stream entry and notes the
'fired' event; wq_fire_now fires a job due as it is written (enqueue, reschedule, debounce,
schedules) and notes it in the history; wq_expired and wq_expire drop a job whose expiry has
passed instead (wheelq.core.expiry).
Includes: base, envelope, events, history, status
]]
-- Fire through wq_fire_entry and, while events are on, note the 'fired' event: into `fired`
-- (a flat id, attempt table a loop passes to wq_events once) or, without it, at once.
local function wq_fire(ready, topic, member, due, env, callbacks, fired)
  local added = wq_fire_entry(ready, topic, member, due, env, callbacks)
  if WQ_EVENTS and type(added) == 'string' then
    local id = member
    if type(env[7]) == 'string' and env[7] ~= '' then
      id = env[7]
    end
    local attempt = env[3]
    if type(attempt) ~= 'number' then
      attempt = tonumber(attempt) or 0
    end
    if fired then
      fired[#fired + 1] = id
      fired[#fired + 1] = attempt
    else
      wq_events('fired', nil, {id, attempt})
    end
  end
  return added
end

-- Whether a decoded envelope's expiry (slot 12: epoch ms; wheelq.core.expiry.expired) has
-- passed: the job is then dropped (wq_expire), never fired. Callers test env[12] first, so a
-- job without one costs a table read.
local function wq_expired(env)
  local x = env[12]
  if x == nil or x == '' then
    return false
  end
  x = tonumber(x)
  return x ~= nil and x > 0 and x < wq_now_ms()
end

-- Drop a job as expired (wq_expired) instead of firing it: a first attempt's history field
-- <id><US><US> (WQ_EXPIRED) notes when, a retry's group record becomes 'X' (keeping its entry
-- and error); the shard's 'expired' count (its limits hash) and the 'expired' event.
local function wq_expire(history, old, member, env)
  local id = member
  if type(env[7]) == 'string' and env[7] ~= '' then
    id = env[7]
  end
  local now = wq_now_ms()
  local group = nil
  if type(env[6]) == 'string' and env[6] ~= '' then
    group = env[6]
    local field = id .. WQ_US .. group
    local last = wq_read_record(wq_hget(history, old, field))
    redis.call('HSET', history, field,
      wq_record('X', last and last[2] or '', now, 0, last and last[5] or '', 'expired', ''))
  else
    redis.call('HSET', history, id .. WQ_EXPIRED, wq_fmt(now))
  end
  if WQ_LIMITS then
    redis.pcall('HINCRBY', WQ_LIMITS, 'expired', 1)
  end
  wq_event('expired', id, group, env[3])
end

-- Fire a job due now from its stored envelope (enqueue and reschedule) and note it in the
-- history (or drop it, expired): nil once appended or dropped (then a second value, true:
-- dropped at its expiry), else the reply the script returns as it is (MALFORMED, or the
-- XADD's error).
local function wq_fire_now(ready, history, old, topic, id, due, envelope, callbacks)
  local env, why = wq_envelope(envelope)
  if not env then
    return {WQ_MALFORMED, topic, id, why}
  end
  if env[12] and wq_expired(env) then
    wq_expire(history, old, id, env)
    return nil, true -- dropped at its expiry: the caller tells what follows it
  end
  local added = wq_fire(ready, topic, id, due, env, callbacks)
  if type(added) == 'table' and added.err then
    return redis.error_reply(added.err)
  end
  local rec = {}
  wq_fired(rec, history, old, id, env, added)
  wq_remember(history, rec)
  return nil
end
