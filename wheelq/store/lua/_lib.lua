--[[ _lib.lua — helpers prepended to the wheelq scripts that name them (wheelq.store.scripts).
Numbers are written by wq_fmt ('%d' for whole ms, '%.0f' else): Lua's tostring() turns
13-digit ms into exponent notation.
]]

-- Reply status: the first element of every reply, the same in every script
-- (wheelq.store.scripts.Status; a unit test holds the two tables together).
local WQ_OK = 0           -- {0, outcome fields...}: as each script's header says
local WQ_WRONG_TYPE = -1  -- {-1, key}: the key holds another type; nothing written
local WQ_LEASE_LOST = -2  -- {-2}: the caller does not hold the shard's lease; nothing written
local WQ_MALFORMED = -3   -- {-3, topic, job id, why}: a job due now cannot be decoded
local WQ_LATE = -4        -- {-4, topic, deadline ms, now ms}: a replay past its deadline

-- What enqueue and reschedule did with a job (wheelq.store.scripts.Placed, NOT_PENDING).
local WQ_SCHEDULED = 0
local WQ_FIRED = 1
local WQ_DUPLICATE = 2    -- enqueue: pending already, replace not asked for (not written)
local WQ_NOT_PENDING = 3  -- reschedule: no such pending job (nothing written)
local WQ_APPLIED = 4      -- enqueue, a spool replay: an earlier call applied it (not written)
local WQ_FULL = 5         -- enqueue: the shard is at its max_pending share (nothing written)

-- What delete_group and create_group found or did on one stream (wheelq.store.scripts.GroupOutcome).
local WQ_NO_GROUP = 0         -- no such group (or no stream): nothing done
local WQ_GROUP_FOUND = 1      -- 'check' mode: the group is there; nothing done
local WQ_GROUP_BUSY = 2       -- 'delete' mode: entries in flight; the group is kept
local WQ_GROUP_DESTROYED = 3  -- XGROUP DESTROY done
local WQ_GROUP_CREATED = 4    -- create_group: XGROUP CREATE done
local WQ_GROUP_LIMIT = 5      -- create_group: the stream has its cap of groups; nothing done

local function wq_fmt(n)
  -- A whole number (every ms time is one) goes through the C library's integer formatting,
  -- a tenth of the cost of its float formatting; anything else is rounded by '%.0f'.
  if n % 1 == 0 and n > -9007199254740992 and n < 9007199254740992 then
    return string.format('%d', n)
  end
  return string.format('%.0f', n)
end

-- redis.call(cmd, key, args...) in slices of at most 4000 arguments (Lua's unpack() limit is
-- about 8000; an even slice size keeps field/value pairs together). Returns the replies joined
-- when each is a list (HMGET), else the last reply.
-- With call = redis.pcall, an error reply (a table with .err) is returned as it comes.
local function wq_multi(cmd, key, args, call)
  call = call or redis.call
  local out = {}
  local last
  for i = 1, #args, 4000 do
    last = call(cmd, key, unpack(args, i, math.min(i + 3999, #args)))
    if type(last) == 'table' and last.err then
      return last
    end
    if type(last) == 'table' then
      for _, v in ipairs(last) do
        out[#out + 1] = v
      end
    end
  end
  if type(last) == 'table' then
    return out
  end
  return last
end

-- Whether member `a` sorts before `b` in byte order (memcmp), as a sorted set orders members
-- of one score; Lua's own < on strings follows the locale.
local function wq_bytes_before(a, b)
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x < y
    end
  end
  return #a < #b
end

-- The Redis server's clock in ms: the one clock due times live on.
local function wq_now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Whether `mark` ({T:s}:followed) is `token`'s, and since when (Redis ms) a watcher has seen
-- its liveness connection gone (nil: not seen gone). The mark is the token, or "token ms".
local function wq_marked(mark, token)
  if not mark then
    return false, nil
  end
  if mark == token then
    return true, nil
  end
  local n = #token
  if string.sub(mark, 1, n + 1) ~= token .. ' ' then
    return false, nil
  end
  local since = tonumber(string.sub(mark, n + 2))
  return since ~= nil, since
end

-- The WRONG_TYPE reply {-1, key} naming the first key whose type is neither absent nor the
-- expected one (arguments: key, type, key, type, ...); nil when every key fits.
-- Called before the first write, so a script never fails half-way.
local function wq_wrong_type(...)
  local a = {...}
  for i = 1, #a, 2 do
    local t = redis.call('TYPE', a[i])['ok']
    if t ~= 'none' and t ~= a[i + 1] then
      return {WQ_WRONG_TYPE, a[i]}
    end
  end
  return nil
end

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
      and (env[11] == nil or type(env[11]) == 'string') and env[12] == nil then
    return env
  end
  for i = 3, 5 do
    local n = env[i]
    if type(n) ~= 'number' or n ~= math.floor(n) or n < 0 or (i < 5 and n > 2147483647) then
      return nil, 'field ' .. i .. ' is ' .. tostring(n) .. ', not an integer in range'
    end
  end
  for i = 6, math.max(11, table.maxn(env)) do
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
-- written, and the error is returned for the caller to report.
local function wq_fire_entry(ready, topic, member, due, env, callbacks)
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
  return redis.pcall('XADD', stream, '*', 'id', id, 'topic', topic, 'due', due,
    'attempt', attempt, 'max_attempts', max_attempts, 'payload', env[2], 'enqueued', enqueued,
    unpack(WQ_ENTRY_MORE, 1, n))
end

-- Job events (wheelq.core.events; docs/architecture.md "Job events"). A script that changes a
-- job's state calls wq_events_on first: while the shard's limits say events are on (field
-- 'events': the most events the stream keeps), wq_events appends one entry for the events of
-- one kind and group the call made: fields k (kind), g (group, absent for none), j (msgpack
-- array job id, attempt, ...: attempt 0 when not known; absent for a group's paused or
-- resumed) and c (the shard's running count of events written, up to this entry's: trim.lua
-- keeps the last `events` of them). One entry, not one per event: an XADD costs Redis some
-- 1.5 us, an event packed into a batch's entry a tenth of that. While events are off this
-- costs a test. A key of the wrong type fails only the events (pcall), never the change.
local WQ_EVENTS, WQ_EVENTS_CAP, WQ_EVENTS_LIMITS = false, '0', false
local function wq_events_on(limits, events)
  local cap = redis.pcall('HGET', limits, 'events')
  if type(cap) == 'string' then
    WQ_EVENTS, WQ_EVENTS_CAP, WQ_EVENTS_LIMITS = events, cap, limits
  end
end

local function wq_events(kind, group, jobs)
  if not WQ_EVENTS then
    return
  end
  local n = 1
  local f = {'XADD', WQ_EVENTS, 'MAXLEN', '~', WQ_EVENTS_CAP, '*', 'k', kind}
  if type(group) == 'string' and group ~= '' then
    f[#f + 1] = 'g'
    f[#f + 1] = group
  end
  if jobs then
    n = math.floor(#jobs / 2)
    if n < 1 then
      return
    end
    f[#f + 1] = 'j'
    f[#f + 1] = cmsgpack.pack(jobs)
  end
  local count = redis.pcall('HINCRBY', WQ_EVENTS_LIMITS, 'events_n', n)
  if type(count) == 'number' then
    f[#f + 1] = 'c'
    f[#f + 1] = count
  end
  redis.pcall(unpack(f))
end

-- One event of a job (`id`), or of a group or topic (`id` nil: paused, resumed).
local function wq_event(kind, id, group, attempt)
  if WQ_EVENTS then
    wq_events(kind, group, id and {id, tonumber(attempt) or 0} or nil)
  end
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

-- Job history ({T:s}:history and {T:s}:history_old; wheelq.core.history reads them,
-- docs/architecture.md "Job history"). Field <id> holds the entry id of the job's latest firing
-- for every group; field <id><US><group> (<US> = \31, never in a job id) holds a msgpack record
-- of what that group last did with it: {kind, entry, at ms, duration ms, error, reason,
-- dead-letter entry}, kind 'F' fired for this group only (a retry or a replay; error: the last
-- attempt's), 'S' succeeded, 'R' failed and put back to run again, 'D' dead-lettered, 'C' its
-- retry was cancelled (cancel.lua turns the 'R').
-- Two generations: every write goes to {T:s}:history; trim.lua renames it to
-- {T:s}:history_old, noting in field <US>upto the stream's last entry then, and drops the old
-- generation whole once the stream is trimmed past that entry (no record in it names an
-- entry still in the stream). A reader asks the current generation first, then the old one.
local WQ_US = '\31'
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

-- Forget jobs (a table of ids): out of the shard's sorted set and its envelope hash.
local function wq_forget(delayed, jobs, ids)
  if #ids > 0 then
    wq_multi('ZREM', delayed, ids)
    wq_multi('HDEL', jobs, ids)
  end
end

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

-- A flat reply {name_1, value_1, ...} (XINFO, a stream entry's fields) as a table name -> value.
local function wq_fields(flat)
  local t = {}
  for i = 1, #flat, 2 do
    t[flat[i]] = flat[i + 1]
  end
  return t
end

-- Results' waiters (wheelq.producer.results; docs/architecture.md "Job results"): `waiters`
-- ({T:s}:waiters, ZSET) holds "id<US>group" (the history field of the outcome awaited) -> ms
-- the wait ends; a waiter reads `done` ({T:s}:done, STREAM) from before it looked the job up.
-- A script that settles entries asks wq_waited once per call (one EXISTS: nothing more when
-- nobody waits on the shard), then wq_wake adds one entry naming each waited field it
-- settled (`fields`: every `step`-th item from the first; ack passes its field/record pairs).
-- redis.pcall: a key of another type wakes nobody, and fails nothing.
local WQ_DONE_KEEP_MS = '10000' -- {T:s}:done expires this long after its last entry
local WQ_DONE_MAXLEN = '1000' -- about this many entries kept (a waiter reading a full
                              -- COUNT looks the job up again: it may have missed one)

local function wq_waited(waiters)
  return redis.call('EXISTS', waiters) == 1
end

local function wq_wake(waiters, done, fields, step)
  local woken = {}
  for i = 1, #fields, step or 1 do
    local score = redis.pcall('ZSCORE', waiters, fields[i])
    if type(score) == 'string' then
      woken[#woken + 1] = fields[i]
      woken[#woken + 1] = '1'
    end
  end
  for i = 1, #woken, 2000 do
    redis.pcall('XADD', done, 'MAXLEN', '~', WQ_DONE_MAXLEN, '*',
      unpack(woken, i, math.min(i + 1999, #woken)))
  end
  if #woken > 0 then
    redis.pcall('PEXPIRE', done, WQ_DONE_KEEP_MS)
  end
end

-- Dead letters of `group`, taken from its stream `ready` one entry at a time, then told once
-- (claim.lua, dead_letter.lua):
--   local letters = wq_dead_letters(ready, dead, history, group)
--   letters.add(entry, reason, err)   -- for each entry, once it is acked
--   letters.tell(waiters, done)       -- one 'dead' event a job, one note to results' waiters
-- add copies the entry into the dead-letter stream: its fields as they are, followed by the
-- dead-letter annotations (wheelq.core.job); the group's history record of the job says so.
local function wq_dead_letters(ready, dead, history, group)
  local letters, fields, jobs = {}, {}, {}
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
      jobs[#jobs + 1] = id
      jobs[#jobs + 1] = attempt
    end
  end
  function letters.tell(waiters, done)
    wq_events('dead', group, jobs)
    if #fields > 0 and wq_waited(waiters) then
      wq_wake(waiters, done, fields)
    end
  end
  return letters
end

-- Whether `entry` is pending in `group` to the delivery a pull receipt names (the consumer it
-- went to and its delivery count then; wheelq.worker.pull): 1 it is, 0 it is not pending
-- (settled already), -1 it is pending to a later delivery (taken over since: the receipt is
-- stale and must settle nothing). No stream or no such group: not pending, as XACK has it.
local function wq_delivered(stream, group, entry, consumer, deliveries)
  local found = redis.pcall('XPENDING', stream, group, entry, entry, 1)
  local p = not found.err and found[1]
  if not p then
    return 0
  end
  if p[2] == consumer and p[4] == tonumber(deliveries) then
    return 1
  end
  return -1
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

-- Stream ids "ms-seq" as {ms, seq}, and their order.
local function wq_id(s)
  local ms, seq = string.match(s, '^(%d+)-(%d+)$')
  return {tonumber(ms), tonumber(seq)}
end

local function wq_id_lt(a, b)
  local x, y = wq_id(a), wq_id(b)
  return x[1] < y[1] or (x[1] == y[1] and x[2] < y[2])
end

-- The cancel fence (docs/architecture.md, "The life of a job"): a cancel that removed a
-- pending attempt of a job notes, in history field <id><US> (no group: a group name is never
-- empty), the last entry of each stream then, "<ready> <callbacks>" ('0-0': empty). An attempt
-- whose entry is at or before its stream's mark fired before that cancel and is never retried
-- (retry.lua), in any group; a job of the id enqueued again fires after it, past the mark, and
-- is retried as usual. Pending entries are never trimmed, and a history generation is dropped
-- only once the streams are trimmed past it, so the fence lasts as long as an entry it fences
-- can be pending (and its memory is the history's).
local function wq_fence_cancel(history, ready, callbacks, id)
  local marks = {}
  for i, stream in ipairs({ready, callbacks}) do
    local last = redis.call('XREVRANGE', stream, '+', '-', 'COUNT', 1)[1]
    marks[i] = last and last[1] or '0-0'
  end
  redis.call('HSET', history, id .. WQ_US, marks[1] .. ' ' .. marks[2])
end

-- Whether the attempt of job `id` that fired as `entry` (of the callbacks stream when
-- `callbacks`, else of the ready stream) fired before a cancel of the job (wq_fence_cancel).
local function wq_fenced(history, old, id, entry, callbacks)
  local fence = wq_hget(history, old, id .. WQ_US)
  if not fence then
    return false
  end
  local ready_mark, callbacks_mark = string.match(fence, '^(%d+%-%d+) (%d+%-%d+)$')
  local mark = callbacks and callbacks_mark or ready_mark
  return mark ~= nil and not wq_id_lt(mark, entry)
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

-- A pending job's stamp: which write put its envelope there, as 16 hex digits of the
-- envelope's SHA1 (an envelope holds the payload, the options and the client's ms of the
-- enqueue, so a job enqueued again under its id has another stamp unless every byte is the
-- same). A bulk action's selection records it with the job's due time, and its act goes on
-- only while both are the same (wq_as_selected; docs/architecture.md, "Bulk actions").
local function wq_stamp(envelope)
  return string.sub(redis.sha1hex(envelope), 1, 16)
end

-- A job list's rows: for each member of `members` (in order), the member, its due ms
-- (`dues[i]`, false: not pending) and its envelope, or its size in bytes when it is larger
-- than `max` (a list never copies a huge payload), appended to `out`. `max` 0: neither
-- (false), for a caller that needs ids and due times only. The envelope is read from `jobs`
-- unless `held[i]` has it already (a far record's). With `stamps`, each row has a fourth
-- value: its envelope's stamp (wq_stamp; false: none).
local function wq_list_rows(jobs, members, dues, max, out, held, stamps)
  for i, member in ipairs(members) do
    out[#out + 1] = member
    out[#out + 1] = dues[i]
    local envelope = held and held[i]
    if stamps and not envelope then
      envelope = redis.call('HGET', jobs, member)
    end
    if max <= 0 then
      out[#out + 1] = false
    elseif envelope then
      out[#out + 1] = #envelope > max and #envelope or envelope
    else
      local size = redis.call('HSTRLEN', jobs, member)
      if size > max then
        out[#out + 1] = size
      else
        out[#out + 1] = redis.call('HGET', jobs, member) or false
      end
    end
    if stamps then
      out[#out + 1] = envelope and wq_stamp(envelope) or false
    end
  end
  return out
end

-- The far tier (docs/architecture.md, "The far tier"; wheelq.core.far_tier does the same
-- arithmetic in Python). A shard's far tier hangs off its meta hash KEYS {T:s}:far:
--   {T:s}:far            HASH  'width': the narrowest leaf's span in ms, at most 65535
--                              (60000 unless set while the tier is empty); 'level',
--                              'split': the index's shape (linear hashing); 'entries': far
--                              jobs (one index entry each); 'at': "leaf:position" promotion
--                              has reached in the leaf it is promoting
--   {T:s}:far:<leaf>     LIST  the leaf's records: the id (u8 length and its bytes, or 0 and
--                              16 bytes: a generated id's 128 bits), the due ms into the
--                              leaf (u16 at level 0, u24 at 1-2, u32 at 3-4), envelope (a record
--                              whose index entry points elsewhere is dead: cancelled,
--                              rescheduled or replaced)
--   {T:s}:far:buckets    ZSET  leaf -> its start ms: the leaves, in time order
--   {T:s}:far:live       HASH  leaf -> its live records (absent: none), so a count of the
--                              far jobs due by a time reads whole leaves' counts
--   {T:s}:far:ix:<n>     HASH  fingerprint (6 bytes of the id's SHA1) -> location, 5 bytes
--                              (leaf * WQ_FAR_POSITIONS + position in the leaf's list)
-- A leaf is an aligned span of width * 16^level ms (level 0-4: a minute to 45 days), its id
-- (start / width - base) * 8 + level, base counting widths to WQ_FAR_EPOCH (small ids, so a
-- location fits 5 bytes); leaves never overlap. A job goes in the leaf covering its due
-- time, or in a new one, the widest free span holding it that starts beyond the horizon; a
-- leaf of WQ_FAR_CAP records splits into its 16 children, so sparse jobs share wide leaves
-- and dense ones narrow leaves, none more than WQ_FAR_CAP. The keys are built from the meta
-- key: one slot, as every key of the shard.
-- WQ_FAR_DEFAULT: a topic's horizon while its limits hash has no 'far' (an hour)
local WQ_FAR_WIDTH, WQ_FAR_FANOUT, WQ_FAR_TOP, WQ_FAR_DEFAULT = 60000, 16, 4, 3600000
-- WQ_FAR_EPOCH: 2023-11-14, before any far job's due time (leaf ids count from it)
local WQ_FAR_CAP, WQ_FAR_POSITIONS, WQ_FAR_LOAD, WQ_FAR_EPOCH = 512, 512, 64, 1700000000000

-- The far tier's functions, made only by a call that reads or writes a far tier (each local
-- function of a script is a closure made on every call: an enqueue to a topic without one
-- makes none of these). wq_far_state puts them on its table: far:find(id), far:put(jobs, now).
local function wq_far_tier()
  local WQ_FAR_OFFSET = {'>H', '>I3', '>I3', '>I4', '>I4'} -- by level + 1: the due ms into a leaf

  -- An id's fingerprint (6 bytes) and the 32 bits the index is addressed by.
  local function wq_far_fp(id)
    local n = tonumber(string.sub(redis.sha1hex(id), 1, 12), 16) -- 48 bits: a double holds them
    return struct.pack('>I6', n), math.floor(n / 65536)
  end

  local function wq_far_index(far, h)
    local n = 2 ^ far.level
    local address = h % n
    if address < far.split then
      address = h % (2 * n)
    end
    return far.meta .. ':ix:' .. wq_fmt(address)
  end

  -- A leaf's span, start and level from its id; its id from its start and level.
  local function wq_far_span(far, level)
    return far.width * WQ_FAR_FANOUT ^ level
  end

  local function wq_far_leaf(far, leaf)
    local level = leaf % 8
    return ((leaf - level) / 8 + far.base) * far.width, level
  end

  local function wq_far_leaf_id(far, start, level)
    return (start / far.width - far.base) * 8 + level
  end

  local function wq_far_key(far, leaf)
    return far.meta .. ':' .. wq_fmt(leaf)
  end

  -- Add `n` (< 0: take) to a leaf's count of live records.
  local function wq_far_live(far, leaf, n)
    local live = far.meta .. ':live'
    if redis.call('HINCRBY', live, wq_fmt(leaf), n) <= 0 then
      redis.call('HDEL', live, wq_fmt(leaf))
    end
  end

  -- A record of a leaf (at `start`, of `level`), and back: its id, due ms and envelope.
  -- A generated id (26 Crockford base32 characters, the first 0-7: 128 bits) in 16 bytes, and
  -- back: a byte for the first two characters, then 5 bytes for each 8 characters.
  local WQ_B32 = '0123456789ABCDEFGHJKMNPQRSTVWXYZ'
  local digits, letters = {}, {} -- a character's byte -> its value, and a value -> the character
  for i = 1, 32 do
    digits[string.byte(WQ_B32, i)], letters[i - 1] = i - 1, string.sub(WQ_B32, i, i)
  end
  local function wq_far_id_bytes(id)
    if #id ~= 26 or not string.find(id, '^[0-7][0-9A-HJKMNP-TV-Z]+$') then
      return nil
    end
    local b = {string.byte(id, 1, 26)}
    local out = {string.char(digits[b[1]] * 32 + digits[b[2]])}
    for chunk = 0, 2 do
      local n = 0
      for i = 3 + chunk * 8, 10 + chunk * 8 do
        n = n * 32 + digits[b[i]]
      end
      out[chunk + 2] = struct.pack('>I5', n)
    end
    return table.concat(out)
  end

  local function wq_far_id_text(raw)
    local first = string.byte(raw, 1)
    local chars = {letters[math.floor(first / 32)], letters[first % 32]}
    for chunk = 0, 2 do
      local n = struct.unpack('>I5', raw, 2 + chunk * 5)
      for i = 10 + chunk * 8, 3 + chunk * 8, -1 do
        local d = n % 32
        chars[i] = letters[d]
        n = (n - d) / 32
      end
    end
    return table.concat(chars)
  end

  local function wq_far_pack(id, due, envelope, start, level)
    local packed = wq_far_id_bytes(id)
    local head = packed and ('\0' .. packed) or (string.char(#id) .. id)
    return head .. struct.pack(WQ_FAR_OFFSET[level + 1], due - start) .. envelope
  end

  local function wq_far_unpack(record, start, level)
    local n, id = string.byte(record, 1)
    if n == 0 then
      n, id = 16, wq_far_id_text(string.sub(record, 2, 17))
    else
      id = string.sub(record, 2, 1 + n)
    end
    local offset, rest = struct.unpack(WQ_FAR_OFFSET[level + 1], record, 2 + n)
    return id, start + offset, string.sub(record, rest)
  end

  -- A record's due ms alone, its id not decoded (a list passes over records out of its range
  -- at this cost).
  local function wq_far_due(record, start, level)
    local n = string.byte(record, 1)
    return start + struct.unpack(WQ_FAR_OFFSET[level + 1], record, n == 0 and 18 or 2 + n)
  end

  -- A location as stored (5 bytes) and read back.
  local function wq_far_loc(leaf, position)
    return struct.pack('>I5', leaf * WQ_FAR_POSITIONS + position)
  end

  local function wq_far_where(loc)
    local n = struct.unpack('>I5', loc)
    local position = n % WQ_FAR_POSITIONS
    return (n - position) / WQ_FAR_POSITIONS, position
  end

  -- The far job stored under `id`: {ix, fp, due, envelope}, or nil.
  local function wq_far_find(far, id)
    if far.entries <= 0 then
      return nil
    end
    local fp, h = wq_far_fp(id)
    local ix = wq_far_index(far, h)
    local loc = redis.call('HGET', ix, fp)
    if not loc then
      return nil
    end
    local leaf, position = wq_far_where(loc)
    local record = redis.call('LINDEX', wq_far_key(far, leaf), position)
    if not record then
      return nil
    end
    local start, level = wq_far_leaf(far, leaf)
    local rid, due, envelope = wq_far_unpack(record, start, level)
    if rid ~= id then -- another id's fingerprint: that id keeps it, this one is not far
      return nil
    end
    return {ix = ix, fp = fp, due = due, envelope = envelope, leaf = leaf}
  end

  -- Whether the record of `id` at (leaf, position) is live: its index entry points at it.
  local function wq_far_indexed(far, id, leaf, position)
    local fp, h = wq_far_fp(id)
    return redis.call('HGET', wq_far_index(far, h), fp) == wq_far_loc(leaf, position)
  end

  -- Take a found far job out (its record stays, dead, until its leaf splits or is promoted).
  local function wq_far_drop(far, found)
    redis.call('HDEL', found.ix, found.fp)
    wq_far_live(far, found.leaf, -1)
    far.entries = far.entries - 1
    redis.call('HINCRBY', far.meta, 'entries', -1)
  end

  -- One more index hash: the entries of hash 'split' whose next address bit is set move to
  -- hash split + 2^level (linear hashing: a hash of at most a few hundred entries at a time).
  local function wq_far_grow(far)
    local n = 2 ^ far.level
    local from = far.meta .. ':ix:' .. wq_fmt(far.split)
    local entries = redis.call('HGETALL', from)
    local moved, fps, m = {}, {}, 0
    for i = 1, #entries, 2 do
      local b1, b2, b3, b4 = string.byte(entries[i], 1, 4)
      if (((b1 * 256 + b2) * 256 + b3) * 256 + b4) % (2 * n) ~= far.split then
        moved[2 * m + 1], moved[2 * m + 2] = entries[i], entries[i + 1]
        m = m + 1
        fps[m] = entries[i]
      end
    end
    if m > 0 then
      wq_multi('HSET', far.meta .. ':ix:' .. wq_fmt(far.split + n), moved)
      wq_multi('HDEL', from, fps)
    end
    far.split = far.split + 1
    if far.split == n then
      far.level, far.split = far.level + 1, 0
    end
    redis.call('HSET', far.meta, 'level', far.level, 'split', far.split)
  end

  -- Append records to a leaf and point their index entries at them: `add` holds, per record,
  -- its index hash, fingerprint and packed record (three entries a record).
  local function wq_far_append(far, leaf, start, add)
    local key, records = wq_far_key(far, leaf), {}
    for i = 3, #add, 3 do
      records[#records + 1] = add[i]
    end
    local length = wq_multi('RPUSH', key, records)
    if length == #records then
      redis.call('ZADD', far.meta .. ':buckets', wq_fmt(start), wq_fmt(leaf))
    end
    wq_far_live(far, leaf, #records)
    local first = length - #records
    for i = 1, #add, 3 do
      redis.call('HSET', add[i], add[i + 1], wq_far_loc(leaf, first + (i - 1) / 3))
    end
  end

  -- Split a full leaf into the children its live records fall in (dead ones are dropped).
  local function wq_far_split(far, leaf, start, level)
    local key = wq_far_key(far, leaf)
    local child, span = level - 1, wq_far_span(far, level - 1)
    local children, order = {}, {}
    for position, record in ipairs(redis.call('LRANGE', key, 0, -1)) do
      local id, due, envelope = wq_far_unpack(record, start, level)
      local fp, h = wq_far_fp(id)
      local ix = wq_far_index(far, h)
      if redis.call('HGET', ix, fp) == wq_far_loc(leaf, position - 1) then
        local at = math.floor(due / span) * span
        local add = children[at]
        if not add then
          add = {}
          children[at] = add
          order[#order + 1] = at
        end
        add[#add + 1], add[#add + 2], add[#add + 3] = ix, fp, wq_far_pack(id, due, envelope, at, child)
      end
    end
    redis.call('DEL', key)
    redis.call('ZREM', far.meta .. ':buckets', wq_fmt(leaf))
    redis.call('HDEL', far.meta .. ':live', wq_fmt(leaf))
    for _, at in ipairs(order) do
      wq_far_append(far, wq_far_leaf_id(far, at, child), at, children[at])
    end
  end

  -- The leaf a job due at `due` goes in (id, start, level), made room in; nil when it belongs
  -- in the sorted set: the leaf covering `due` starts within the horizon (it is being
  -- promoted, or soon), or is a full leaf of level 0.
  local function wq_far_leaf_for(far, due, now)
    local low, buckets = now + far.horizon, far.meta .. ':buckets'
    for _ = 0, WQ_FAR_TOP do
      local found = redis.call('ZRANGE', buckets, wq_fmt(due), '-inf', 'BYSCORE', 'REV', 'LIMIT', 0,
        1, 'WITHSCORES')
      local leaf = found[1] and tonumber(found[1])
      local start, level
      if leaf then
        start, level = wq_far_leaf(far, leaf)
      end
      if not leaf or due >= start + wq_far_span(far, level) then
        -- no leaf covers it: the widest free span holding it, beyond the horizon (a leaf
        -- overlapping a span either lies inside it or would cover `due`)
        for l = WQ_FAR_TOP, 0, -1 do
          local span = wq_far_span(far, l)
          local at = math.floor(due / span) * span
          if at >= low and #redis.call('ZRANGE', buckets, wq_fmt(at), '(' .. wq_fmt(at + span),
              'BYSCORE', 'LIMIT', 0, 1) == 0 then
            return wq_far_leaf_id(far, at, l), at, l
          end
        end
        return nil
      end
      if start < low then
        return nil
      end
      if redis.call('LLEN', wq_far_key(far, leaf)) < WQ_FAR_CAP then
        return leaf, start, level
      end
      if level == 0 then
        return nil
      end
      wq_far_split(far, leaf, start, level) -- and look again: a child covers it, or will
    end
    return nil
  end

  -- Put jobs in the far tier where they belong: a job goes there when a leaf beyond the horizon
  -- takes it (see wq_far_leaf_for) and no other id holds its fingerprint. `jobs` holds per job
  -- its id, due ms and envelope (three entries a job); returns those no leaf took, as `jobs`
  -- holds them, for the caller to schedule in the sorted set as any job. Consecutive jobs of
  -- one leaf are appended together (one RPUSH, one count), so a batch in due order costs a
  -- few commands a job; the leaf is written before another is looked for (a look may split).
  local function wq_far_put(far, jobs, now)
    local left, l = {}, 0
    if far.horizon <= 0 then
      return jobs
    end
    local held = {} -- fingerprints this call puts
    local open, add, added = nil, {}, 0 -- the leaf being appended to, its records and count
    local function flush()
      if added > 0 then
        wq_far_append(far, open.leaf, open.start, add)
        far.entries = far.entries + added
        redis.call('HINCRBY', far.meta, 'entries', added)
        while far.entries > WQ_FAR_LOAD * (2 ^ far.level + far.split) do
          wq_far_grow(far)
        end
      end
      open, add, added = nil, {}, 0
    end
    for i = 1, #jobs, 3 do
      local id, due, envelope = jobs[i], jobs[i + 1], jobs[i + 2]
      local fp, h, ix
      if due >= now + far.horizon and #id <= 255 then
        fp, h = wq_far_fp(id)
        if held[fp] then
          fp = nil
        end
      end
      if fp and not (open and due >= open.start and due < open.finish
          and open.length + added < WQ_FAR_CAP) then
        flush()
        local leaf, start, level = wq_far_leaf_for(far, due, now)
        if leaf then
          open = {leaf = leaf, start = start, level = level,
            finish = start + wq_far_span(far, level),
            length = redis.call('LLEN', wq_far_key(far, leaf))}
        else
          fp = nil
        end
      end
      if fp then -- looked up in the index's shape now: the one the held records are filed under
        ix = wq_far_index(far, h)
        if redis.call('HEXISTS', ix, fp) == 1 then
          fp = nil
        end
      end
      if fp then
        held[fp] = true
        add[added * 3 + 1], add[added * 3 + 2] = ix, fp
        add[added * 3 + 3] = wq_far_pack(id, due, envelope, open.start, open.level)
        added = added + 1
      else
        left[l + 1], left[l + 2], left[l + 3] = id, due, envelope
        l = l + 3
      end
    end
    flush()
    return left
  end

  return {find = wq_far_find, drop = wq_far_drop, put = wq_far_put, leaf = wq_far_leaf,
    key = wq_far_key, index = wq_far_index, fp = wq_far_fp, unpack = wq_far_unpack,
    loc = wq_far_loc, live = wq_far_live, span = wq_far_span, due = wq_far_due,
    indexed = wq_far_indexed}
end

-- A far tier's functions (wq_far_tier) are made on the first use of one: a call that finds
-- no far job and puts none makes none.
local WQ_FAR_LAZY = {__index = function(far, name)
  for n, fn in pairs(wq_far_tier()) do
    rawset(far, n, fn)
  end
  return rawget(far, name)
end}

-- The far tier of a shard as one call sees it: its meta key, narrowest width, index shape,
-- count and horizon (`horizon`: the limits hash's 'far' as read, false when it has none, so
-- WQ_FAR_DEFAULT; '0': no far tier; nil: 0, for a caller that only finds and drops).
local function wq_far_state(meta, horizon)
  local raw = redis.call('HMGET', meta, 'width', 'level', 'split', 'entries')
  local width = tonumber(raw[1]) or WQ_FAR_WIDTH
  if horizon == false then
    horizon = WQ_FAR_DEFAULT
  end
  local far = {meta = meta, width = width, level = tonumber(raw[2]) or 0,
    split = tonumber(raw[3]) or 0, entries = tonumber(raw[4]) or 0,
    horizon = tonumber(horizon) or 0, base = math.floor(WQ_FAR_EPOCH / width)}
  return setmetatable(far, WQ_FAR_LAZY)
end

-- Whether a job due at `due` belongs beyond the far tier's horizon (far:put decides whether a
-- leaf takes it).
local function wq_far_takes(far, due, now)
  return far.horizon > 0 and due >= now + far.horizon
end

-- The far job stored under `id` ({ix, fp, due, envelope}, or nil) and the far tier as read
-- (`horizon` as for wq_far_state).
local function wq_far_found(meta, horizon, id)
  local far = wq_far_state(meta, horizon)
  return far.entries > 0 and far:find(id) or nil, far
end


-- A bulk action's guard (docs/architecture.md, "Bulk actions"): whether job `id` is still as
-- its selection recorded it, in one script with the act, so a job moved or written again
-- meanwhile is left alone. As recorded: in `state` ('p': pending under its id, not a retry;
-- 'r': a pending retry, under the id or one of `aliases`, the id's alias members), due at
-- `due` (ms) with its envelope's stamp `stamp` (wq_stamp). `delayed`, `jobs`, `retries`,
-- `far`: the shard's {T:s}:delayed, :jobs, :retries and :far.
local function wq_as_selected(delayed, jobs, retries, far, id, aliases, state, due, stamp)
  due = tonumber(due)
  local function same(at, envelope, retry)
    return at ~= false and at ~= nil and envelope ~= false and envelope ~= nil
      and retry == (state == 'r') and tonumber(at) == due and wq_stamp(envelope) == stamp
  end
  local at, envelope = redis.call('ZSCORE', delayed, id), redis.call('HGET', jobs, id)
  if at and envelope then
    if same(at, envelope, redis.call('ZSCORE', retries, id) ~= false) then
      return true
    end
  elseif state == 'p' then -- a job is in one tier at a time; a retry is never in the far tier
    local found = wq_far_found(far, nil, id)
    return found ~= nil and same(found.due, found.envelope, false)
  end
  if state == 'r' then
    for _, alias in ipairs(aliases) do
      if same(redis.call('ZSCORE', delayed, alias), redis.call('HGET', jobs, alias), true) then
        return true
      end
    end
  end
  return false
end
