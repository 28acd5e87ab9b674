--[[ reschedule.lua — move a pending job to a new due time (earlier or later); fire it if due.
A job awaiting another (after=: resolve.lua) is not pending here: it has no due time to move.
Every pending attempt of the id moves: the job stored under it and each group's retry stored
under an alias member (all at the same due time, each firing in its own group). An attempt
waiting on the due line (due, not fired yet) is pending still: it leaves the line (wq_unhold)
and is scheduled at its new due time like the others.
KEYS[1]  {T:s}:delayed   ZSET    job id -> due ms: the job and its retries' alias members, moved
KEYS[2]  {T:s}:jobs      HASH    member -> envelope (read, to fire an attempt due now)
KEYS[3]  {T:s}:ready     STREAM  the attempts due at their new time, fired
KEYS[4]  {T:s}:horizon   STRING  ms the leader has preloaded up to (absent: no leader)
KEYS[5]  {T:s}:inbox     LIST    "due:id" notes for the leader
KEYS[6]  {T:s}:history   HASH    job id -> its latest entry (the attempts fired now)
KEYS[7]  {T:s}:history_old HASH  the history's previous generation (read by wq_fired)
KEYS[8]  {T:s}:limits    HASH    "ready": due now, the job fires only while the stream has room
         under it, else it is moved to its due time (wheelq.core.flow)
KEYS[9]  {T:s}:callbacks STREAM  fired jobs that carry a callback (wq_fire)
KEYS[10] {T:s}:retries   ZSET    pending retries' members, score 0 (retry.lua): the id, or alias
         members "id<US>group<US>entry", the lex range [id<US>, id<US + 1>); one fired now
         leaves it
KEYS[11] {T:s}:events    STREAM  job events while the topic has them on (wq_event)
KEYS[12] {T:s}:far       HASH    the far tier's meta: the job may be there, and goes there when
         moved beyond KEYS[8]'s "far" horizon (a retry stays in the sorted set)
KEYS[13] {T:s}:held      HASH    the due line's jobs (includes/held.lua): an attempt there has
         its envelope in KEYS[2] and no due time in KEYS[1]
KEYS[14] {T:s}:keyed     HASH    the key index (includes/keyed.lua): an attempt of a job with a
         key fired now leaves its key's count
KEYS[15] {T:s}:followers HASH    jobs waiting on these (includes/follow.lua): a job due now and
         dropped at its expiry instead of fired tells them 'X'
KEYS[16] {T:s}:notices   STREAM  the notices (the leader nudged through KEYS[5])
ARGV[1]  topic
ARGV[2]  wake channel
ARGV[3]  job id
ARGV[4]  mode: 'd' (ARGV[5] ms after TIME) | 'a' (ARGV[5] is the due ms) | 's' (ARGV[5] ms,
         either sign, from the job's own due time as it is now: a tree's shift, read and
         moved in one step; an attempt on the due line is due now)
ARGV[5]  value, ms
ARGV[6..8] (optional: a bulk action's act) the job as its selection recorded it: its state
         ('p' pending | 'r' retrying), due ms and stamp (wq_stamp): nothing moves unless it
         is still so (wq_as_selected)
Returns: {0, placed}   0 SCHEDULED (moved; due now too, with the stream at its limit), 1 FIRED
           now (every attempt), 3 NOT_PENDING: not pending, or not as ARGV[6..8] recorded it
           (nothing written)
         {-1, key}   WRONG_TYPE (nothing written)
         {-3, topic, id, why}   MALFORMED: due now, but an envelope of the id cannot be decoded
           (nothing written; the scheduler dead-letters it when it comes due)
Includes: base, envelope, events, far_tier, fire, flow, follow, held, history, keyed, pending, selections, status
]]
wq_events_on(KEYS[8], KEYS[11])
local wrong = wq_wrong_type(KEYS[1], 'zset', KEYS[2], 'hash', KEYS[3], 'stream', KEYS[4], 'string',
  KEYS[5], 'list', KEYS[10], 'zset', KEYS[13], 'hash')
if wrong then return wrong end
local id = ARGV[3]
-- The id's pending attempts: members with both an envelope and a due time (in the sorted
-- set, or on the due line).
local members, envelopes = {}, {}
local function pending(member)
  local envelope = redis.call('HGET', KEYS[2], member)
  local score = envelope and redis.call('ZSCORE', KEYS[1], member)
  if score and tonumber(score) >= WQ_WAIT_DUE then
    return -- awaiting the job it follows (resolve.lua): it has no due time to move yet
  end
  if envelope and (score or redis.call('HEXISTS', KEYS[13], member) == 1) then
    local n = #members + 1
    members[n], envelopes[n] = member, envelope
  end
end
local aliases = redis.call('ZRANGE', KEYS[10], '[' .. id .. WQ_US, '(' .. id .. '\32', 'BYLEX')
if ARGV[6] and not wq_as_selected(KEYS[1], KEYS[2], KEYS[10], KEYS[12], id, aliases, ARGV[6],
    ARGV[7], ARGV[8]) then
  return {WQ_OK, WQ_NOT_PENDING}
end
pending(id)
for _, alias in ipairs(aliases) do
  pending(alias)
end
local far = wq_far_state(KEYS[12], redis.call('HGET', KEYS[8], 'far'))
local far_found = #members == 0 and far.entries > 0 and far:find(id)
if far_found then
  members[1], envelopes[1] = id, far_found.envelope
end
if #members == 0 then
  return {WQ_OK, WQ_NOT_PENDING}
end
local now = wq_now_ms()
local due = tonumber(ARGV[5])
if ARGV[4] == 'd' then
  due = now + due
elseif ARGV[4] == 's' then
  local base = far_found and far_found.due or tonumber(redis.call('ZSCORE', KEYS[1], members[1]))
  due = (base or now) + due
end
local room = due <= now and wq_fire_room(KEYS[8], {KEYS[3], KEYS[9]})
local placed = WQ_SCHEDULED
local index = nil -- the key index's changes (wq_keyed): attempts of a key fired now
if due <= now and not (room and room <= 0) then
  for i = 1, #members do -- every envelope is checked before anything is written
    local env, why = wq_envelope(envelopes[i])
    if not env then
      return {WQ_MALFORMED, ARGV[1], id, why}
    end
    if type(env[10]) == 'string' and env[10] ~= '' then
      index = index or wq_keyed(KEYS[14])
      index.gone(env[10], members[i])
    end
  end
  placed = WQ_FIRED
end
local horizon = tonumber(redis.call('GET', KEYS[4]))
if far_found then
  far:drop(far_found)
end
for _, member in ipairs(members) do -- off the due line: it is placed anew below
  wq_unhold(KEYS[13], member)
end
-- The job itself (not a retry) may go to the far tier.
local plain = redis.call('ZSCORE', KEYS[10], id) == false
local told = 0 -- followers told of a job dropped at its expiry (includes/follow.lua)
for i, member in ipairs(members) do
  if due <= now and not (room and room <= 0) then
    local refused, dropped = wq_fire_now(KEYS[3], KEYS[6], KEYS[7], ARGV[1], member, due,
      envelopes[i], KEYS[9])
    if refused then
      return refused
    end
    if dropped and member == id and wq_followed(KEYS[15]) then -- dropped at its expiry: an end
      told = told + wq_tell(KEYS[15], KEYS[16], id, '', 'X', 'expired')
    end
    wq_forget(KEYS[1], KEYS[2], {member})
    redis.call('ZREM', KEYS[10], member)
    if room then
      room = room - 1
    end
  else
    placed = WQ_SCHEDULED -- at its due time, or held back by the "ready" limit
    if member == id and plain and wq_far_takes(far, due, now)
        and #far:put({id, due, envelopes[i]}, now) == 0 then
      wq_forget(KEYS[1], KEYS[2], {member})
    else
      wq_schedule(KEYS[1], KEYS[2], KEYS[5], ARGV[2], horizon, member, due, envelopes[i])
    end
  end
end
if index then
  index.apply(wq_keyed_live(KEYS[2], KEYS[10], far))
end
if told > 0 then
  wq_nudge(KEYS[5], KEYS[15])
end
return {WQ_OK, placed}
