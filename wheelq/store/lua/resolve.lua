--[[ resolve.lua — waiting jobs of this shard (wheelq.core.follow; docs/architecture.md, "Jobs
that follow jobs"): write one ('w'), or hear the outcomes of the jobs they wait on ('n').
A waiting job is pending under its id at WQ_WAIT_DUE (the last ms of year 9999: no leader
ever reads it into its window) with its record in KEYS[12]: msgpack {token, delay ms, policy,
what it still waits on}: a list of references (a continuation's), or, for a join, their count,
the references themselves in the set KEYS[12]:<token>:left. A reference is
"topic<US>shard<US>id<US>group" (wheelq.core.follow.wire_ref). An outcome heard for a
reference it still waits on leaves it; when none is left the job is due `delay` from now
(fired at once when due now and the stream has room, as enqueue does). An outcome other than
a success ('D' dead, 'C' cancelled, 'X' expired) does what the policy says: 'c' cancel the
job (and tell its own followers), 'r' go on as if it had succeeded, 'f' dead-letter the job
with that outcome's error and ask the caller to cancel every reference still waited on (the
record stays, policy 'x', until their own outcomes are heard; a notice heard again asks
again). An outcome heard for a token whose job is not written yet (its edges were, the job's
write is on its way) is kept under KEYS[12]:<token> for WQ_EARLY_MS, and the write hears it.
Hearing an outcome twice changes nothing: a reference heard is no longer waited on, and a job
no longer waiting keeps no record (a late replay of a notice writes an early note that
expires).
KEYS[1]  {T:s}:delayed   ZSET    job id -> due ms (a waiting job's WQ_WAIT_DUE; its due time)
KEYS[2]  {T:s}:jobs      HASH    member -> envelope
KEYS[3]  {T:s}:ready     STREAM  a job due now fires here (its groups: a dead letter's records)
KEYS[4]  {T:s}:horizon   STRING  ms the leader has preloaded up to (absent: no leader)
KEYS[5]  {T:s}:inbox     LIST    "due:id" notes for the leader
KEYS[6]  {T:s}:history   HASH    job id -> its latest entry (a job fired now); a dead-lettered
         job's group records ('D')
KEYS[7]  {T:s}:history_old HASH  the history's previous generation (read by wq_fired)
KEYS[8]  {T:s}:limits    HASH    "ready": a job due now fires only while the stream has room;
         "ordered", "fair": none fires at once (wq_fire_room)
KEYS[9]  {T:s}:callbacks STREAM  fired jobs that carry a callback (wq_fire)
KEYS[10] {T:s}:events    STREAM  job events while the topic has them on (wq_event)
KEYS[11] {T:s}:keyed     HASH    the key index: a waiting job with a key is noted; fired,
         cancelled or dead-lettered, it leaves
KEYS[12] {T:s}:waiting   HASH    waiting job id -> its record (above)
KEYS[13] {T:s}:cancelled ZSET    job id -> ms it was cancelled (a waiting job cancelled)
KEYS[14] {T:s}:followers HASH    the edges of jobs waiting on this shard's jobs (a waiting job
         cancelled or dead-lettered tells its own followers)
KEYS[15] {T:s}:notices   STREAM  where those notices go
KEYS[16] {T:s}:waiters   ZSET    results awaited (a cancel or a dead letter wakes them)
KEYS[17] {T:s}:done      STREAM  the note naming a cancelled or dead-lettered job
KEYS[18] {T:s}:far       HASH    the far tier's meta: a job pending there is pending
KEYS[19] {T:s}:dead      STREAM  dead letters: a job whose policy is 'f' and one of whose
         references failed
ARGV[1]  topic
ARGV[2]  wake channel
ARGV[3]  'w': write a waiting job; ARGV[4] its id, ARGV[5] its envelope, ARGV[6] its key ('':
         none), ARGV[7] its record, ARGV[8] the Redis ms after which the write is refused
         (LATE: its producer froze past the time an early outcome is kept), ARGV[9..] a
         join's references (its children, kept in order in the list {T:s}:children:<id>, and
         the set of those still waited on when its record holds their count)
         'n': notices heard, ARGV[4] a msgpack array of them, each {the waiting job's id, its
         token, the reference, the outcome ('S' succeeded, 'D' dead, 'C' cancelled, 'X'
         expired), the error} (one argument: thousands of notices cost Redis one parse)
Returns: {0, ...} as the mode says:
         'w': {0, placed, {references to cancel}}  placed: 0 WAITING (written), 1 FIRED,
           6 RELEASED (due later: everything it waits on had ended), 7 CANCELLED, 8 DEAD (a
           reference had failed, by its policy), 2 DUPLICATE: a job of the id is pending
           (nothing written)
         'n': {0, heard, released, ended, {references to cancel}}  notices that changed a
           waiting job, jobs made due, jobs cancelled or dead-lettered
         {-1, key}   WRONG_TYPE (nothing written)
         {-3, topic, id, why}   MALFORMED: a released job's envelope cannot be decoded
         {-4, topic, deadline ms, now ms}   LATE (nothing written)
Includes: base, envelope, events, far_tier, fire, flow, follow, history, keyed, pending, status, waiters
]]
wq_events_on(KEYS[8], KEYS[10])
local wrong = wq_wrong_type(KEYS[1], 'zset', KEYS[2], 'hash', KEYS[3], 'stream', KEYS[5], 'list',
  KEYS[12], 'hash', KEYS[14], 'hash', KEYS[15], 'stream', KEYS[19], 'stream')
if wrong then return wrong end
local WQ_RELEASED, WQ_CANCELLED, WQ_DEAD = 6, 7, 8
local topic, channel = ARGV[1], ARGV[2]
local now = wq_now_ms()
local index = wq_keyed(KEYS[11])
local told = 0
local released, ended, heard = 0, 0, 0
local to_cancel = {} -- references the caller cancels (a failed join's siblings)

local function key_gone(id, envelope)
  local key = envelope and wq_key_of(envelope)
  if key and key ~= '' then
    index.gone(key, id)
  end
end

-- The set of a join's references still waited on.
local function left_of(rec)
  return KEYS[12] .. ':' .. rec[1] .. ':left'
end

-- A join's children, in order: kept while it waits, and WQ_CHILDREN_KEEP_MS after.
local function children_of(id)
  return string.sub(KEYS[12], 1, -8) .. 'children:' .. id
end

-- The record leaves (and a join's set with it; its children list expires).
local function forget(id, rec)
  redis.call('HDEL', KEYS[12], id)
  if type(rec[4]) ~= 'table' then
    redis.call('DEL', left_of(rec))
  end
  redis.call('PEXPIRE', children_of(id), WQ_CHILDREN_KEEP_MS)
end

-- Every reference heard: the job is due `delay` from now.
local function release(id, rec)
  forget(id, rec)
  local envelope = redis.call('HGET', KEYS[2], id)
  if not envelope then
    return WQ_RELEASED
  end
  released = released + 1
  local due = now + rec[2]
  local room = due <= now and wq_fire_room(KEYS[8], {KEYS[3], KEYS[9]})
  if due <= now and not (room and room <= 0) then
    local refused, dropped = wq_fire_now(KEYS[3], KEYS[6], KEYS[7], topic, id, due, envelope,
      KEYS[9])
    if refused then
      return refused
    end
    wq_forget(KEYS[1], KEYS[2], {id})
    key_gone(id, envelope)
    if dropped and wq_followed(KEYS[14]) then -- dropped at its expiry instead: an end
      told = told + wq_tell(KEYS[14], KEYS[15], id, '', 'X', 'expired')
    end
    return WQ_FIRED
  end
  wq_schedule(KEYS[1], KEYS[2], KEYS[5], channel, tonumber(redis.call('GET', KEYS[4])), id, due,
    envelope)
  return WQ_RELEASED
end

-- The job leaves, never run: cancelled, or (`letter`: its reason and error) dead-lettered
-- with a record 'D' in each group of the stream (or 'default' when it has none yet).
local function unwait(id, why, letter)
  local envelope = redis.call('HGET', KEYS[2], id)
  if not envelope then
    return nil
  end
  ended = ended + 1
  wq_forget(KEYS[1], KEYS[2], {id})
  key_gone(id, envelope)
  local fields = {id}
  if letter then
    local env = wq_envelope(envelope)
    local added = env and wq_fire_entry(KEYS[19], topic, id, now, env, KEYS[19],
      {'reason', 'failed', 'error', why, 'group', '', 'entry', ''})
    local groups = {}
    if redis.call('EXISTS', KEYS[3]) == 1 then
      for _, flat in ipairs(redis.call('XINFO', 'GROUPS', KEYS[3])) do
        groups[#groups + 1] = wq_fields(flat)['name']
      end
    end
    if #groups == 0 then
      groups[1] = 'default'
    end
    fields = {}
    for _, group in ipairs(groups) do
      local field = id .. WQ_US .. group
      -- its entry '0-0': it never fired, and no group's last delivered entry is before it
      redis.call('HSET', KEYS[6], field, wq_record('D', '0-0', now, 0, why, 'failed',
        type(added) == 'string' and added or ''))
      fields[#fields + 1] = field
    end
    wq_event('dead', id, nil, 1)
  else
    redis.call('ZADD', KEYS[13], wq_fmt(now), id)
    wq_event('cancelled', id)
  end
  if wq_waited(KEYS[16]) then
    wq_wake(KEYS[16], KEYS[17], fields)
    redis.pcall('XADD', KEYS[17], 'MAXLEN', '~', WQ_DONE_MAXLEN, '*', id, '1')
    redis.pcall('PEXPIRE', KEYS[17], WQ_DONE_KEEP_MS)
  end
  if wq_followed(KEYS[14]) then
    told = told + wq_tell(KEYS[14], KEYS[15], id, '', letter and 'D' or 'C', why)
  end
  return nil
end

-- Whether `rec` still waits on `ref`; it no longer does after this call.
local function take(rec, ref)
  if type(rec[4]) ~= 'table' then
    return redis.call('SREM', left_of(rec), ref) == 1
  end
  for i, r in ipairs(rec[4]) do
    if r == ref then
      table.remove(rec[4], i)
      return true
    end
  end
  return false
end

-- What `rec` still waits on, as references.
local function still(rec)
  if type(rec[4]) == 'table' then
    return rec[4]
  end
  return redis.call('SMEMBERS', left_of(rec))
end

local function waits_on(rec)
  if type(rec[4]) == 'table' then
    return #rec[4]
  end
  return redis.call('SCARD', left_of(rec))
end

local function ask_cancel(rec)
  for _, r in ipairs(still(rec)) do
    to_cancel[#to_cancel + 1] = r
  end
end

-- Job `id` (its record `rec`) hears that `ref` ended with `outcome`; returns what became of
-- it when that is decided now (cancelled, dead-lettered), else nil: whether it is due is
-- decided once a call has heard all its notices for it (`settle`), so a join's count is read
-- once a call, however many of its children ended.
local function hear(id, rec, ref, outcome, err)
  if rec.over then
    return nil
  end
  local found = take(rec, ref)
  if found then
    heard = heard + 1
    rec.heard = true
  end
  if not found or rec[3] == 'x' then -- 'x': dead-lettered, its references being cancelled
    return nil
  end
  if outcome ~= 'S' and (rec[3] == 'c' or rec[3] == 'f') then
    rec.over = true
    local why = 'a job it waited on (' .. string.gsub(ref, '\31', '/') .. ') ended ' .. outcome
      .. (err ~= '' and (': ' .. err) or '')
    if rec[3] == 'c' then
      forget(id, rec)
      unwait(id, why)
      return WQ_CANCELLED
    end
    unwait(id, why, true)
    rec.over, rec[3], rec.heard = false, 'x', true -- settle keeps its record, or lets it go
    return WQ_DEAD
  end
  return nil
end

-- After a call's notices for job `id`: due when it waits on nothing more; a dead-lettered
-- one's references are asked to be cancelled again (a notice heard again after a crash) and
-- its record leaves once they have all ended. Returns what became of it (nil: it waits on).
local function settle(id, rec)
  if rec.over then
    return nil
  end
  if rec.succeeded then -- a join's children that succeeded, left in one SREM
    local removed = wq_multi('SREM', left_of(rec), rec.succeeded)
    heard = heard + removed
    rec.heard = rec.heard or removed > 0
  end
  rec.over = true
  if waits_on(rec) == 0 then
    if rec[3] == 'x' then
      forget(id, rec)
      return nil
    end
    return release(id, rec)
  end
  if rec.heard and (type(rec[4]) == 'table' or rec[3] == 'x') then
    redis.call('HSET', KEYS[12], id, cmsgpack.pack({rec[1], rec[2], rec[3], rec[4]}))
  end
  if rec[3] == 'x' then
    ask_cancel(rec)
  end
  return nil
end

local function done(out)
  if told > 0 then
    wq_nudge(KEYS[5], KEYS[14])
  end
  index.apply(wq_keyed_live(KEYS[2], nil, KEYS[18]))
  out[#out + 1] = to_cancel
  return out
end

if ARGV[3] == 'w' then
  local id, envelope, key, raw = ARGV[4], ARGV[5], ARGV[6], ARGV[7]
  if now > tonumber(ARGV[8]) then
    return {WQ_LATE, topic, ARGV[8], wq_fmt(now)}
  end
  if redis.call('HEXISTS', KEYS[2], id) == 1 then
    return {WQ_OK, WQ_DUPLICATE, {}}
  end
  local far = wq_far_state(KEYS[18], nil)
  if far.entries > 0 and far:find(id) then
    return {WQ_OK, WQ_DUPLICATE, {}}
  end
  redis.call('HSET', KEYS[2], id, envelope)
  redis.call('ZADD', KEYS[1], wq_fmt(WQ_WAIT_DUE), id)
  if key ~= '' then
    index.note(key, id)
  end
  local rec = cmsgpack.unpack(raw)
  redis.call('HSET', KEYS[12], id, raw)
  if #ARGV > 8 then
    local refs = {}
    for i = 9, #ARGV do
      refs[#refs + 1] = ARGV[i]
    end
    wq_multi('RPUSH', children_of(id), refs)
    if type(rec[4]) ~= 'table' then
      wq_multi('SADD', left_of(rec), refs)
    end
  end
  local placed = 0
  local early = KEYS[12] .. ':' .. rec[1]
  local outcomes = redis.call('HGETALL', early)
  for i = 1, #outcomes, 2 do
    local o = cmsgpack.unpack(outcomes[i + 1])
    local got = hear(id, rec, outcomes[i], o[1], o[2])
    if type(got) == 'table' then
      return got
    end
    placed = got or placed
  end
  if #outcomes > 0 then
    redis.call('DEL', early)
  end
  local got = settle(id, rec)
  if type(got) == 'table' then
    return got
  end
  return done({WQ_OK, got or placed})
end

local records, touched = {}, {} -- each waiting job's record, read once a call
for _, n in ipairs(cmsgpack.unpack(ARGV[4])) do
  local id, token, ref, outcome, err = n[1], n[2], n[3], n[4], n[5]
  local rec = records[id]
  if rec == nil then
    local raw = redis.call('HGET', KEYS[12], id)
    rec = raw and cmsgpack.unpack(raw) or false
    records[id] = rec
  end
  if rec and rec[1] == token then
    if not rec.touched then
      rec.touched = true
      touched[#touched + 1] = id
    end
    if outcome == 'S' and type(rec[4]) ~= 'table' and rec[3] ~= 'x' then
      local succeeded = rec.succeeded or {} -- a join's: heard together (settle)
      succeeded[#succeeded + 1] = ref
      rec.succeeded = succeeded
    else
      local got = hear(id, rec, ref, outcome, err)
      if type(got) == 'table' then
        return got
      end
    end
  else -- its write is on its way (or it has heard all it waited for: then nobody reads this)
    local early = KEYS[12] .. ':' .. token
    redis.call('HSET', early, ref, cmsgpack.pack({outcome, err}))
    redis.call('PEXPIRE', early, WQ_EARLY_MS)
  end
end
for _, id in ipairs(touched) do
  local got = settle(id, records[id])
  if type(got) == 'table' then
    return got
  end
end
return done({WQ_OK, heard, released, ended})
