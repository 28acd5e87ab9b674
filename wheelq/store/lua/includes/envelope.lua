--[[ includes/envelope.lua — the envelope and the ready-stream entry fired from it: wq_envelope
decodes one (never raising), wq_fire_entry writes the entry (wheelq.core.job.READY_ENTRY is
the same definition), wq_entry_envelope reads an entry back as a first attempt's envelope.
Includes: base
]]
-- Decode an envelope
-- [1, payload, attempt, max_attempts, enqueued_ms(, group, job id(, option...))]: each
-- option slot (8 on) a string, one a stored option (wheelq.core.options.STORED), in order.
-- Returns the table, or nil and why it is not one (written by something else, or corrupted):
-- never raises, so one bad envelope cannot fail a whole call.
local function wq_envelope(envelope)
  local ok, env = pcall(cmsgpack.unpack, envelope)
  if not ok then
    return nil, 'not msgpack (' .. tostring(env) .. ')'
  end
  if type(env) ~= 'table' then
    return nil, 'not a msgpack array but a ' .. type(env)
  end
  if env[1] ~= 1 then
    return nil, 'unknown envelope version ' .. tostring(env[1])
  end
  if type(env[2]) ~= 'string' then
    return nil, 'payload is a ' .. type(env[2]) .. ', not a string'
  end
  -- The usual envelope passes these checks unrolled, without a call per field (the emit's hot
  -- path); any other is judged, and named, by the loops below.
  local a, m, t = env[3], env[4], env[5]
  if type(a) == 'number' and type(m) == 'number' and type(t) == 'number'
      and a % 1 == 0 and a >= 0 and a <= 2147483647
      and m % 1 == 0 and m >= 0 and m <= 2147483647 and t % 1 == 0 and t >= 0
      and (env[6] == nil or type(env[6]) == 'string') and (env[7] == nil or type(env[7]) == 'string')
      and (env[8] == nil or type(env[8]) == 'string') and (env[9] == nil or type(env[9]) == 'string')
      and (env[10] == nil or type(env[10]) == 'string')
      and (env[11] == nil or type(env[11]) == 'string')
      and (env[12] == nil or type(env[12]) == 'string')
      and (env[13] == nil or type(env[13]) == 'string') and env[14] == nil then
    return env
  end
  for i = 3, 5 do
    local n = env[i]
    if type(n) ~= 'number' or n ~= math.floor(n) or n < 0 or (i < 5 and n > 2147483647) then
      return nil, 'field ' .. i .. ' is ' .. tostring(n) .. ', not an integer in range'
    end
  end
  for i = 6, math.max(13, table.maxn(env)) do
    if env[i] ~= nil and type(env[i]) ~= 'string' then
      return nil, 'field ' .. i .. ' is a ' .. type(env[i]) .. ', not a string'
    end
  end
  return env
end

-- A job's attempt and max_attempts as the entry spells them. A number's tostring is a printf
-- (~3k instructions), and the jobs of one emit mostly share their counts: the last ones
-- spelled are kept for the rest of the call.
local WQ_ATTEMPT, WQ_ATTEMPT_S, WQ_MAX, WQ_MAX_S
local function wq_counts(attempt, max_attempts)
  if attempt ~= WQ_ATTEMPT then
    WQ_ATTEMPT, WQ_ATTEMPT_S = attempt, tostring(attempt)
  end
  if max_attempts ~= WQ_MAX then
    WQ_MAX, WQ_MAX_S = max_attempts, tostring(max_attempts)
  end
  return WQ_ATTEMPT_S, WQ_MAX_S
end

-- A ready-stream entry, written only by wq_fire_entry (wheelq.core.job.READY_ENTRY is the same
-- definition; tests/unit/test_wire.py holds the two together). Every entry has the fields of
-- wq_fire_entry's XADD, in its order; then, each only when set (not nil, not ''), these, in
-- this order. Adding a field is a row here or a pair in that XADD.
local WQ_ENTRY_OPTIONAL = { -- field, the envelope slot it is fired from, a slot that must be
  'group', 6, 0,           -- set too (0: none); flat, so that a call builds one table
  -- each stored option (wheelq.core.options.STORED), from its slot (8 on), in order:
  'trace', 8, 0,
  'callback', 9, 0,
  'key', 10, 0,
  'ordered', 11, 10,
  'expires', 12, 0,
  'priority', 13, 0,
}
local WQ_ENTRY_MORE = {} -- the optional fields of the entry being written (reused: no table a job)

-- XADD a job to the ready stream from its decoded envelope (see wq_envelope): emit_due,
-- enqueue, reschedule and replay all fire through it.
-- A retry's envelope names the one group meant to run it (env[6]), and the job id (env[7])
-- when it is stored under another member.
-- A job with a callback (env[9]) goes to the `callbacks` stream instead of `ready`: only the
-- deliverer's group reads it, and the topic's other groups never see it.
-- `due` is a number, or already a decimal string (a sorted-set score read back); so is the
-- envelope's enqueued_ms (env[5]), written as 'enqueued' so a lookup still has it once the job
-- fired. The call is redis.pcall: a wrong-typed stream fails the XADD, before anything is
-- written, and the error is returned for the caller to report. `extra` (optional): field /
-- value pairs written after the entry's own (a dead letter's annotations: resolve.lua).
local function wq_fire_entry(ready, topic, member, due, env, callbacks, extra)
  -- attempt and max_attempts are small ints: tostring() writes them without exponent.
  local attempt, max_attempts = wq_counts(env[3], env[4])
  local id = member
  if type(env[7]) == 'string' and env[7] ~= '' then
    id = env[7]
  end
  if type(due) == 'number' then
    due = wq_fmt(due)
  end
  local enqueued = env[5]
  if type(enqueued) == 'number' then
    enqueued = wq_fmt(enqueued)
  end
  -- wq_envelope lets each optional slot hold a string or nil only (replay's envelope too).
  -- Every writer fills the slots before the last it sets ('' for unset), so an envelope
  -- without slot 6 has no optional field (a first attempt skips the rows), and #env is the
  -- last slot it sets.
  local n, stream = 0, ready
  if env[6] ~= nil then
    local rows, last = WQ_ENTRY_OPTIONAL, #env
    for i = 1, #rows, 3 do
      local slot = rows[i + 1]
      if slot > last then -- the rows go by slot: none after this one is in the envelope
        break
      end
      local v = env[slot]
      if v and v ~= '' then
        local also = rows[i + 2]
        if also == 0 or (env[also] or '') ~= '' then
          WQ_ENTRY_MORE[n + 1], WQ_ENTRY_MORE[n + 2] = rows[i], v
          n = n + 2
        end
      end
    end
    if env[9] and env[9] ~= '' then
      stream = callbacks
    end
  end
  if extra then -- fields after the entry's own (a dead letter's: resolve.lua)
    for i = 1, #extra do
      WQ_ENTRY_MORE[n + i] = extra[i]
    end
    n = n + #extra
  end
  return redis.pcall('XADD', stream, '*', 'id', id, 'topic', topic, 'due', due,
    'attempt', attempt, 'max_attempts', max_attempts, 'payload', env[2], 'enqueued', enqueued,
    unpack(WQ_ENTRY_MORE, 1, n))
end

-- The envelope of a first attempt of the job a ready-stream entry (or a dead letter, whose
-- fields begin with its entry's) was fired as: wq_fire_entry's inverse, read by the same rows,
-- so firing it writes every optional field the entry had (a field added there comes back
-- too). Slot 7 (the job id) stays '': the caller fires it under the entry's id. `group`:
-- the group it is meant for ('' or nil: every group).
local function wq_entry_envelope(f, group)
  local env = {1, f['payload'], 1, f['max_attempts'] or '1', f['enqueued'] or '0', group or '', ''}
  local rows = WQ_ENTRY_OPTIONAL
  for i = 4, #rows, 3 do -- after 'group': the entry's own is not the group replayed for
    local v, slot = f[rows[i]], rows[i + 1]
    if v and v ~= '' then
      for s = #env + 1, slot - 1 do -- every slot before the last set one filled (wq_fire_entry)
        env[s] = ''
      end
      env[slot] = v
    end
  end
  return env
end
