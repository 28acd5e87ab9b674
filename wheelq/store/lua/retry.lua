--[[ retry.lua — a failed run: ack its entry and put the job back in the sorted set, in one step.
Only the first settlement of an entry counts: if the entry is no longer pending in the group (it
was acked or retried by a worker that took it over), nothing is written. A run that fired
before a cancel of its job (the cancel's fence, wq_fenced) is acked and not put back: the
group's record becomes 'C' (cancelled), and its result's waiters are told.
KEYS[1]  {T:s}:delayed   ZSET    job id -> due ms
KEYS[2]  {T:s}:jobs      HASH    job id -> envelope
KEYS[3]  {T:s}:stream    STREAM  the stream the group reads: {T:s}:ready, or {T:s}:callbacks (the deliverer)
KEYS[4]  {T:s}:horizon   STRING  ms the leader has preloaded up to (absent: no leader)
KEYS[5]  {T:s}:inbox     LIST    "due:id" notes for the leader
KEYS[6]  {T:s}:history   HASH    the group's record of the job becomes 'R' (wq_record)
KEYS[7]  {T:s}:retries   ZSET    the retry's member goes here too, score 0: the index of
         pending retries (cancel and reschedule find an id's aliases in it by lex range; the
         `retrying` list reads it; emit_due removes a member as it fires)
KEYS[8]  {T:s}:limits    HASH    "events", "events_age": the topic's events setting (wheelq.core.events)
KEYS[9]  {T:s}:events    STREAM  job events while the topic has them on (wq_event)
KEYS[10] {T:s}:far       HASH    the far tier's meta: a job of the id may be pending there
KEYS[11] {T:s}:history_old HASH  the history's previous generation (the fence is read there too)
KEYS[12] {T:s}:waiters   ZSET    results awaited (wq_waited, wq_wake: see ack.lua)
KEYS[13] {T:s}:done      STREAM  one entry naming the awaited record written (a cancelled run)
KEYS[14] {T:s}:ready     STREAM  the ready stream: KEYS[3] is it, or the callbacks stream
KEYS[15] {T:s}:keyed     HASH    the key index (includes/keyed.lua): a retry of a job with a key
         is noted under it (its envelope's key)
KEYS[16] {T:s}:followers HASH    jobs waiting on it (includes/follow.lua): a run fenced by a
         cancel tells them 'C'
KEYS[17] {T:s}:notices   STREAM  the notices
ARGV[1]  consumer group
ARGV[2]  the entry id
ARGV[3]  job id
ARGV[4]  delay, ms after TIME
ARGV[5]  envelope of the next attempt (names the group and the job id)
ARGV[6]  wake channel
ARGV[7]  the failed attempt's error (kept in the group's history record)
ARGV[8]  when the attempt ended, ms
ARGV[9]  optional, a pull receipt's consumer and ARGV[10] its delivery count: the entry is
         retried only while pending to that delivery (wq_delivered)
Returns: {0, 1, due_ms, member} retried; the member is the job id, or "id<US>group<US>entry"
           when a job of that id is pending again (<US> = \31, never in a job id)
         {0, 0} the entry was not pending in the group (nothing written)
         {0, 2} it fired before a cancel of the job: acked, its record 'C', not put back
         {0, -1} it is pending to a later delivery than ARGV[9..10]'s (nothing written)
         {-1, key}   WRONG_TYPE (nothing written)
Includes: base, delivery, envelope, events, far_tier, follow, history, keyed, pending, status, waiters
]]
wq_events_on(KEYS[8], KEYS[9])
local wrong = wq_wrong_type(KEYS[1], 'zset', KEYS[2], 'hash', KEYS[3], 'stream', KEYS[4], 'string',
  KEYS[5], 'list', KEYS[6], 'hash', KEYS[7], 'zset')
if wrong then return wrong end
if ARGV[9] and wq_delivered(KEYS[3], ARGV[1], ARGV[2], ARGV[9], ARGV[10]) == -1 then
  return {WQ_OK, -1}
end
if redis.call('XACK', KEYS[3], ARGV[1], ARGV[2]) == 0 then
  return {WQ_OK, 0}
end
if wq_fenced(KEYS[6], KEYS[11], ARGV[3], ARGV[2], KEYS[3] ~= KEYS[14]) then
  local field = ARGV[3] .. WQ_US .. ARGV[1]
  redis.call('HSET', KEYS[6], field, wq_record('C', ARGV[2], tonumber(ARGV[8]), 0, ARGV[7], '', ''))
  if wq_waited(KEYS[12]) then
    wq_wake(KEYS[12], KEYS[13], {field})
  end
  if wq_followed(KEYS[16]) and wq_tell(KEYS[16], KEYS[17], ARGV[3], ARGV[1], 'C', 'cancelled') > 0 then
    wq_nudge(KEYS[5], KEYS[16])
  end
  return {WQ_OK, 2}
end
local member = ARGV[3]
if redis.call('HEXISTS', KEYS[2], member) == 1
    or wq_far_found(KEYS[10], redis.call('HGET', KEYS[8], 'far'), member) then
  member = ARGV[3] .. WQ_US .. ARGV[1] .. WQ_US .. ARGV[2]
end
redis.call('ZADD', KEYS[7], 0, member)
local due = wq_now_ms() + tonumber(ARGV[4])
wq_schedule(KEYS[1], KEYS[2], KEYS[5], ARGV[6], tonumber(redis.call('GET', KEYS[4])), member, due,
  ARGV[5])
redis.call('HSET', KEYS[6], ARGV[3] .. WQ_US .. ARGV[1],
  wq_record('R', ARGV[2], tonumber(ARGV[8]), 0, ARGV[7], '', ''))
local env = wq_envelope(ARGV[5])
if env and type(env[10]) == 'string' and env[10] ~= '' then
  local index = wq_keyed(KEYS[15])
  index.note(env[10], ARGV[3])
  index.apply(wq_keyed_live(KEYS[2], KEYS[7], KEYS[10]))
end
if WQ_EVENTS then -- the attempt that failed, as its entry says
  local found = redis.call('XRANGE', KEYS[3], ARGV[2], ARGV[2])[1]
  wq_event('retrying', ARGV[3], ARGV[1], found and wq_fields(found[2])['attempt'])
end
return {WQ_OK, 1, wq_fmt(due), member}
