--[[ includes/fire.lua — firing a job: wq_fire writes its ready-stream entry and notes the
'fired' event; wq_fire_now fires a job due as it is written (enqueue, reschedule, debounce,
schedules) and notes it in the history.
Includes: envelope, events, history, status
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

-- Fire a job due now from its stored envelope (enqueue and reschedule) and note it in the
-- history: nil once appended, else the reply the script returns as it is (MALFORMED, or the
-- XADD's error).
local function wq_fire_now(ready, history, old, topic, id, due, envelope, callbacks)
  local env, why = wq_envelope(envelope)
  if not env then
    return {WQ_MALFORMED, topic, id, why}
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
