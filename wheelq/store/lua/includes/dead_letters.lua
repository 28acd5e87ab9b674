--[[ includes/dead_letters.lua — the dead-letter stream's writers, the one place its fields are
spelled (wheelq.core.job): wq_bury for an envelope that cannot be decoded, wq_dead_letters for
a group's entries (claim.lua, dead_letter.lua).
Includes: base, events, follow, history, waiters
]]
-- Move a job whose envelope cannot be decoded to the dead-letter stream as 'malformed',
-- with the raw bytes in 'envelope' (no 'payload' field: replay refuses it). redis.pcall, as
-- wq_fire. With wq_dead_letters, the one place dead-letter fields are spelled (wheelq.core.job).
local function wq_bury(dead, topic, member, due, envelope, why)
  if type(due) == 'number' then
    due = wq_fmt(due)
  end
  return redis.pcall('XADD', dead, '*', 'id', member, 'topic', topic, 'due', due,
    'reason', 'malformed', 'error', 'malformed envelope: ' .. why, 'envelope', envelope)
end

-- Dead letters of `group`, taken from its stream `ready` one entry at a time, then told once
-- (claim.lua, dead_letter.lua):
--   local letters = wq_dead_letters(ready, dead, history, group)
--   letters.add(entry, reason, err)   -- for each entry, once it is acked
--   letters.tell(waiters, done, followers, notices, inbox)
--                                     -- one 'dead' event a job, one note to results' waiters,
--                                     -- a notice to each job waiting on one (follow.lua)
-- add copies the entry into the dead-letter stream: its fields as they are, followed by the
-- dead-letter annotations (wheelq.core.job); the group's history record of the job says so.
local function wq_dead_letters(ready, dead, history, group)
  local letters, fields, jobs, errs = {}, {}, {}, {}
  function letters.add(entry, reason, err)
    local found = redis.call('XRANGE', ready, entry, entry)
    local args = {dead, '*'}
    local id, attempt = nil, 0
    if found[1] then
      local flat = found[1][2]
      for _, v in ipairs(flat) do
        args[#args + 1] = v
      end
      local f = wq_fields(flat)
      id, attempt = f['id'], tonumber(f['attempt']) or 0
    end
    for _, v in ipairs({'reason', reason, 'error', err, 'group', group, 'entry', entry}) do
      args[#args + 1] = v
    end
    local added = redis.call('XADD', unpack(args))
    if id then
      redis.call('HSET', history, id .. WQ_US .. group,
        wq_record('D', entry, wq_now_ms(), 0, err, reason, added))
      fields[#fields + 1] = id .. WQ_US .. group
      errs[#fields] = err
      jobs[#jobs + 1] = id
      jobs[#jobs + 1] = attempt
    end
  end
  function letters.tell(waiters, done, followers, notices, inbox)
    wq_events('dead', group, jobs)
    if #fields > 0 and wq_waited(waiters) then
      wq_wake(waiters, done, fields)
    end
    if #fields > 0 and wq_followed(followers)
        and wq_tell_fields(followers, notices, fields, 1, 'D', errs) > 0 then
      wq_nudge(inbox, followers)
    end
  end
  return letters
end
