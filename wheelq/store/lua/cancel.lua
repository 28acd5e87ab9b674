--[[ cancel.lua — remove every pending attempt of a job id, in one step: the job stored under
the id (a new job, or one group's retry) and each group's retry stored under an alias member.
A removed retry's group record 'R' becomes 'C' (cancelled), so the lookup never reports a retry
that no longer exists. An attempt of the job running then (in another group) may finish, but
the cancel's fence keeps retry.lua from putting it back: a cancel is final.
KEYS[1]  {T:s}:delayed   ZSET    job id -> due ms
KEYS[2]  {T:s}:jobs      HASH    job id -> envelope
KEYS[3]  {T:s}:cancelled ZSET    job id -> Redis ms it was cancelled (the job's history)
KEYS[4]  {T:s}:retries   ZSET    pending retries' members, score 0 (retry.lua): the id, or alias
         members "id<US>group<US>entry", the lex range [id<US>, id<US + 1>)
KEYS[5]  {T:s}:history   HASH    "id<US>group" -> the group's record ('R' becomes 'C')
KEYS[6]  {T:s}:history_old HASH  the history's previous generation (read for the record)
KEYS[7]  {T:s}:waiters   ZSET    results awaited (wq_waited): while any, a cancel wakes them
KEYS[8]  {T:s}:done      STREAM  the note naming the job id (its waiters look it up again)
KEYS[9]  {T:s}:limits    HASH    "events", "events_age": the topic's events setting (wheelq.core.events)
KEYS[10] {T:s}:events    STREAM  job events while the topic has them on (wq_event)
KEYS[11] {T:s}:far       HASH    the far tier's meta: the job may be pending there instead
KEYS[12] {T:s}:ready     STREAM  fired jobs: with KEYS[13], a cancel that removes an attempt
KEYS[13] {T:s}:callbacks STREAM  notes their last entries, the fence past which no attempt that
         fired before it is retried, in any group (wq_cancel_fence, written in KEYS[5])
KEYS[14] {T:s}:held      HASH    the due line's jobs (includes/held.lua): an attempt due and
         not fired yet waits there instead of KEYS[1], and is removed alike (wq_unhold)
KEYS[15] {T:s}:keyed     HASH    the key index (includes/keyed.lua): each removed attempt of a job
         with a key leaves its key's count
KEYS[16] {T:s}:waiting   HASH    waiting jobs' records (resolve.lua): a waiting job cancelled
         leaves it
KEYS[17] {T:s}:followers HASH    jobs waiting on these (includes/follow.lua): each removed
         attempt tells them 'C' (a first attempt: every group's; a retry: its group's)
KEYS[18] {T:s}:notices   STREAM  the notices
KEYS[19] {T:s}:inbox     LIST    the leader's inbox: nudged when a notice was added
ARGV[1]  job id, alone: cancel it whatever it is; or '', a job key and a count: take up to
         that many entries of the key from the key index (wq_keyed_entries) and cancel each
         id's attempts whose envelope carries the key (a key's jobs, read and cancelled in one
         step: an entry taken is done with, its job cancelled or no longer the key's); or,
         four a job, for as many jobs as a call takes (a bulk action's act, a key's jobs):
ARGV[i..i+3] a job id and the job as it was read: its state ('p' pending | 'r' retrying), due
         ms and stamp (wq_stamp): nothing of it is removed unless it is still so
         (wq_as_selected); or 'k', a job key and '': each pending attempt of the id whose
         envelope carries that key (a key's jobs: one written again with the same key is
         still one of them); '' for all three: whatever it is (a job due on the line)
Returns: {0, removed_1, ...}   per job, in order: how many pending attempts were removed (the
           job and each group's retry), those on the due line included; 0: not pending
           (already fired, cancelled, or never there), or not as read (nothing written)
         {0, jobs, more}   a key's entries: how many jobs had attempts removed, and 1 while
           the index may hold more of the key's entries (0: it is read to its end)
         {-1, key}      WRONG_TYPE (nothing written)
Includes: base, envelope, events, far_tier, follow, held, history, ids, keyed, selections, status, waiters
]]
wq_events_on(KEYS[9], KEYS[10])
local wrong = wq_wrong_type(KEYS[1], 'zset', KEYS[2], 'hash', KEYS[3], 'zset', KEYS[4], 'zset',
  KEYS[5], 'hash', KEYS[12], 'stream', KEYS[13], 'stream', KEYS[14], 'hash')
if wrong then return wrong end
local now = wq_now_ms()
local removed, id = 0, nil
local only_key = nil -- a key's jobs: only attempts whose envelope carries this key
local index = wq_keyed(KEYS[15])
local waited = nil -- whether anyone waits on a result (read at the first cancel)
-- ended: history fields "id<US>group" ("id<US>" every group) of the attempts removed, whose
-- followers are told at the end (includes/follow.lua)
local ended = {}
-- A removed attempt's key (member: the attempt's; env: its decoded envelope) leaves the key
-- index.
local function unkey(member, env)
  if env and type(env[10]) == 'string' and env[10] ~= '' then
    index.gone(env[10], member)
  end
end
local function cancel(member)
  local envelope = redis.call('HGET', KEYS[2], member)
  local env = envelope and wq_envelope(envelope)
  if only_key and not (env and env[10] == only_key) then
    return
  end
  redis.call('HDEL', KEYS[2], member)
  if redis.call('ZREM', KEYS[1], member) == 0 and not wq_unhold(KEYS[14], member) then
    return
  end
  removed = removed + 1
  unkey(member, env)
  ended[#ended + 1] = id .. WQ_US .. (env and type(env[6]) == 'string' and env[6] or '')
  if env and type(env[6]) == 'string' and env[6] ~= '' then -- a retry: its group's record
    local field = id .. WQ_US .. env[6]
    local record = wq_read_record(wq_hget(KEYS[5], KEYS[6], field))
    if record and record[1] == 'R' then
      redis.call('HSET', KEYS[5], field, wq_record('C', record[2], now, 0, record[5], '', ''))
    end
  end
end
local far = nil -- the far tier, read at the first job not in the sorted set
local fence = nil -- the cancel fence (wq_cancel_fence), read at the first cancel
-- gone: the cancelled ids' records, written together at the end: their cancel time in
-- KEYS[3] and their fence in KEYS[5] (an attempt running now is never retried)
local gone, fences = {}, {}
local out = {WQ_OK}
local step = #ARGV == 1 and 1 or 4
local args = ARGV
local listed = nil -- a key's entries taken (ARGV: '', key, count): whether it holds more
if #ARGV == 3 and ARGV[1] == '' then
  local ids
  ids, listed = index.take(ARGV[2], tonumber(ARGV[3]))
  args = {}
  for _, taken in ipairs(ids) do
    local n = #args
    args[n + 1], args[n + 2], args[n + 3], args[n + 4] = taken, 'k', ARGV[2], ''
  end
end
local retries = redis.call('ZCARD', KEYS[4]) > 0 -- else no alias to look up
for i = 1, #args, step do
  id, removed = args[i], 0
  local aliases = retries and redis.call('ZRANGE', KEYS[4], '[' .. id .. WQ_US, '(' .. id .. '\32',
    'BYLEX') or {}
  only_key = step == 4 and args[i + 1] == 'k' and args[i + 2] or nil
  if step == 1 or args[i + 1] == '' or only_key or wq_as_selected(KEYS[1], KEYS[2], KEYS[4],
      KEYS[11], id, aliases, args[i + 1], args[i + 2], args[i + 3]) then
    cancel(id)
    if removed == 0 then -- a job is in one tier at a time; a retry is never in the far tier
      far = far or wq_far_state(KEYS[11], nil)
      local found = far.entries > 0 and far:find(id)
      if found and (not only_key or wq_key_of(found.envelope) == only_key) then
        far:drop(found)
        removed = 1
        unkey(id, wq_envelope(found.envelope))
        ended[#ended + 1] = id .. WQ_US
      end
    end
    for _, alias in ipairs(aliases) do
      cancel(alias)
    end
    if retries then
      aliases[#aliases + 1] = id -- a retry under the id itself is in the index too
      wq_multi('ZREM', KEYS[4], aliases)
    end
    if removed > 0 then
      fence = fence or wq_cancel_fence(KEYS[12], KEYS[13])
      gone[#gone + 1], gone[#gone + 2] = wq_fmt(now), id
      fences[#fences + 1], fences[#fences + 2] = id .. WQ_US, fence
      wq_event('cancelled', id)
      if waited == nil then
        waited = wq_waited(KEYS[7])
      end
      if waited then -- the waiters of any group: the note names the id alone
        redis.pcall('XADD', KEYS[8], 'MAXLEN', '~', WQ_DONE_MAXLEN, '*', id, '1')
        redis.pcall('PEXPIRE', KEYS[8], WQ_DONE_KEEP_MS)
      end
    end
  end
  out[#out + 1] = removed
end
if #gone > 0 then
  wq_multi('ZADD', KEYS[3], gone)
  wq_multi('HSET', KEYS[5], fences)
  if redis.call('EXISTS', KEYS[16]) == 1 then -- waiting jobs cancelled leave their records
    local ids = {}
    for i = 2, #gone, 2 do
      ids[#ids + 1] = gone[i]
    end
    wq_multi('HDEL', KEYS[16], ids)
  end
end
if #ended > 0 and wq_followed(KEYS[17])
    and wq_tell_fields(KEYS[17], KEYS[18], ended, 1, 'C') > 0 then
  wq_nudge(KEYS[19], KEYS[17])
end
if listed ~= nil then -- the key's entries taken whose jobs are left: another key's, or stale
  local left = {}
  for j = 2, #out do
    if out[j] == 0 then
      left[#left + 1] = args[(j - 2) * 4 + 1]
    end
  end
  index.keep(left, wq_keyed_members(KEYS[2], KEYS[4], far or KEYS[11]))
end
index.apply(wq_keyed_live(KEYS[2], KEYS[4], far or KEYS[11]))
if listed ~= nil then
  local jobs = 0
  for j = 2, #out do
    jobs = jobs + (out[j] > 0 and 1 or 0)
  end
  return {WQ_OK, jobs, listed and 1 or 0}
end
return out
