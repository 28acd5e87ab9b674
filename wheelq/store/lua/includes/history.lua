--[[ includes/history.lua — job history ({T:s}:history and {T:s}:history_old;
wheelq.core.history reads them, docs/architecture.md "Job history"). Field <id> holds the entry
id of the job's latest firing for every group; field <id><US><group> (<US> = \31, never in a
job id) holds a msgpack record of what that group last did with it: {kind, entry, at ms,
duration ms, error, reason, dead-letter entry}, kind 'F' fired for this group only (a retry or
a replay; error: the last attempt's), 'S' succeeded, 'R' failed and put back to run again, 'D'
dead-lettered, 'C' its retry was cancelled (cancel.lua turns the 'R'), 'X' expired: dropped
at its expiry, never run (its retry at fire, wq_expire, or its entry at a worker's read).
Two generations: every write goes to {T:s}:history; trim.lua renames it to {T:s}:history_old,
noting in field <US>upto the stream's last entry then, and drops the old generation whole once
the stream is trimmed past that entry (no record in it names an entry still in the stream). A
reader asks the current generation first, then the old one. The cancel fence (wq_cancel_fence,
wq_fenced) is a field of the history too.
Includes: base
]]
local WQ_US = '\31'
-- Field <id><US><US>: ms a first attempt of the job was dropped at its expiry, never fired
-- (wq_expire; a group name is never empty, so no group's record has this field).
local WQ_EXPIRED = WQ_US .. WQ_US
local WQ_UPTO = WQ_US .. 'upto' -- in the old generation: the stream's last entry at the rename
local WQ_SINCE = WQ_US .. 'since' -- in the current generation: ms it became the current one
-- In each generation: bytes of the handlers' results written into it (ack.lua); trim.lua adds
-- them to MEMORY USAGE's estimate, which samples a few fields of a hash and so would miss a
-- few large results among many small records.
local WQ_RESULTS = WQ_US .. 'results'

-- A history field: from the current generation, else from the old one (false in neither, as
-- HGET, or when a key holds another type: a read that never raises, so a script that has
-- appended to the stream already cannot stop half-way on it).
local function wq_hget(history, old, field)
  local v = redis.pcall('HGET', history, field)
  if type(v) ~= 'string' then
    v = redis.pcall('HGET', old, field)
  end
  return type(v) == 'string' and v
end

local function wq_record(kind, entry, at, duration, err, reason, dead)
  return cmsgpack.pack({kind, entry, at, duration, err or '', reason or '', dead or ''})
end

-- A group record decoded, or nil when the field holds something else.
local function wq_read_record(raw)
  if not raw then
    return nil
  end
  local ok, r = pcall(cmsgpack.unpack, raw)
  if ok and type(r) == 'table' and type(r[2]) == 'string' then
    return r
  end
  return nil
end

-- Note in `rec` (flat field/value pairs, written by one wq_remember) that the job stored as
-- `member`, decoded as `env`, fired as stream entry `entry`.
local function wq_fired(rec, history, old, member, env, entry)
  local id = member
  if type(env[7]) == 'string' and env[7] ~= '' then
    id = env[7]
  end
  if type(env[6]) == 'string' and env[6] ~= '' then
    local field = id .. WQ_US .. env[6]
    local last = wq_read_record(wq_hget(history, old, field))
    local err = ''
    if last and last[1] == 'R' then
      err = last[5]
    end
    rec[#rec + 1], rec[#rec + 2] = field, wq_record('F', entry, 0, 0, err)
  else
    rec[#rec + 1], rec[#rec + 2] = id, entry
  end
end

local function wq_remember(history, rec)
  if #rec > 0 then
    wq_multi('HSET', history, rec)
  end
end

-- The cancel fence (docs/architecture.md, "The life of a job"): a cancel that removed a
-- pending attempt of a job notes, in history field <id><US> (no group: a group name is never
-- empty), the last entry of each stream then, "<ready> <callbacks>" ('0-0': empty). An attempt
-- whose entry is at or before its stream's mark fired before that cancel and is never retried
-- (retry.lua), in any group; a job of the id enqueued again fires after it, past the mark, and
-- is retried as usual. Pending entries are never trimmed, and a history generation is dropped
-- only once the streams are trimmed past it, so the fence lasts as long as an entry it fences
-- can be pending (and its memory is the history's). wq_cancel_fence is the fence's value now,
-- which cancel.lua writes for each job it cancels (read once a call: the streams do not move
-- within one call).
local function wq_cancel_fence(ready, callbacks)
  local marks = {}
  for i, stream in ipairs({ready, callbacks}) do
    local last = redis.call('XREVRANGE', stream, '+', '-', 'COUNT', 1)[1]
    marks[i] = last and last[1] or '0-0'
  end
  return marks[1] .. ' ' .. marks[2]
end

-- Whether the attempt of job `id` that fired as `entry` (of the callbacks stream when
-- `callbacks`, else of the ready stream) fired before a cancel of the job (wq_cancel_fence).
local function wq_fenced(history, old, id, entry, callbacks)
  local fence = wq_hget(history, old, id .. WQ_US)
  if not fence then
    return false
  end
  local ready_mark, callbacks_mark = string.match(fence, '^(%d+%-%d+) (%d+%-%d+)$')
  local mark = callbacks and callbacks_mark or ready_mark
  return mark ~= nil and not wq_id_lt(mark, entry)
end
