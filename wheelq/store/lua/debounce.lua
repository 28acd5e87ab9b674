--[[ debounce.lua — enqueue with a trailing debounce: each call (re)writes the job due the
debounce (ARGV[4]) from now, so it fires once the calls stop for that long; with a max wait,
never later than that after the first call of the series (which ends when the job fires).
The payload and options of the latest call win.
KEYS[1]  {T:s}:delayed   ZSET    job id -> due ms: the series' job, at each call's due time
KEYS[2]  {T:s}:jobs      HASH    job id -> envelope: the latest call's
KEYS[3]  {T:s}:ready     STREAM  the job, fired once its max wait is up
KEYS[4]  {T:s}:horizon   STRING  ms the leader has preloaded up to (absent: no leader)
KEYS[5]  {T:s}:inbox     LIST    "due:id" notes for the leader
KEYS[6]  {T:s}:history   HASH    job id -> its latest entry (when the job fires)
KEYS[7]  {T:s}:history_old HASH  the history's previous generation (read by wq_fired)
KEYS[8]  {T:s}:debounce  HASH    job id -> the ms its series must fire by (max wait); a
         deadline past is stale, and each call removes up to two stale ones it samples
KEYS[9]  {T:s}:limits    HASH    "ready": due now, the job fires only while the stream has room
         under it, else it is scheduled at its due time (wheelq.core.flow)
KEYS[10] {T:s}:callbacks STREAM  fired jobs that carry a callback (wq_fire)
KEYS[11] {T:s}:events    STREAM  job events while the topic has them on (wq_event)
KEYS[12] {T:s}:retries   ZSET    pending retries' members: a job written over one leaves it
KEYS[13] {T:s}:far       HASH    the far tier's meta: a job of the id pending there is written
         over like one in KEYS[1] (the call's job is kept in KEYS[1])
KEYS[14] {T:s}:held      HASH    the due line's jobs (includes/held.lua): the series' job due
         and waiting there has not fired: it is written over like one in KEYS[1], taken off
         the line (wq_unhold)
KEYS[15] {T:s}:keyed     HASH    the key index (includes/keyed.lua): the job written over leaves
         its key, the job left pending is noted under its own
ARGV[1]  topic
ARGV[2]  wake channel
ARGV[3]  job id
ARGV[4]  debounce, ms (>= 1)
ARGV[5]  max wait, ms ('0': none)
ARGV[6]  envelope (msgpack)
Returns: {0, placed, due}   placed: 0 SCHEDULED (due now too, with the stream at its limit),
           1 FIRED now (the max wait is up); due ms
         {-1, key}   WRONG_TYPE (nothing written)
         {-3, topic, id, why}   MALFORMED: due now, but the envelope cannot be decoded
Includes: base, events, far_tier, fire, flow, held, keyed, pending, status
]]
wq_events_on(KEYS[9], KEYS[11])
local wrong = wq_wrong_type(KEYS[1], 'zset', KEYS[2], 'hash', KEYS[3], 'stream', KEYS[4], 'string',
  KEYS[5], 'list', KEYS[8], 'hash')
if wrong then return wrong end
local id, wait, envelope = ARGV[3], tonumber(ARGV[5]), ARGV[6]
local now = wq_now_ms()
local deadline
local pending = redis.call('ZSCORE', KEYS[1], id)
local held = not pending and redis.call('HEXISTS', KEYS[14], id) == 1
pending = pending or held
-- before: the envelope pending under the id, for the key index
local before = pending and redis.call('HGET', KEYS[2], id)
if not pending then
  local found, far = wq_far_found(KEYS[13], redis.call('HGET', KEYS[9], 'far'), id)
  if found then
    far:drop(found)
    pending, before = true, found.envelope
  end
end
local live = wq_keyed_live(KEYS[2], KEYS[12], KEYS[13])
if pending then
  deadline = tonumber(redis.call('HGET', KEYS[8], id))
  redis.call('ZREM', KEYS[12], id) -- if it was a retry, this call's job replaces it
else
  redis.call('HDEL', KEYS[8], id) -- a series whose job fired: over
end
if wait > 0 and not deadline then -- a new series (or a job enqueued plainly): it starts now
  deadline = now + wait
  redis.call('HSET', KEYS[8], id, wq_fmt(deadline))
end
local due = now + tonumber(ARGV[4])
if deadline and due > deadline then
  due = deadline
end
local sample = redis.call('HRANDFIELD', KEYS[8], 2, 'WITHVALUES')
for i = 1, #sample, 2 do
  if sample[i] ~= id and tonumber(sample[i + 1]) < now then
    redis.call('HDEL', KEYS[8], sample[i])
  end
end
local room = due <= now and wq_fire_room(KEYS[9], {KEYS[3], KEYS[10]})
if due <= now and not (room and room <= 0) then
  local refused = wq_fire_now(KEYS[3], KEYS[6], KEYS[7], ARGV[1], id, due, envelope, KEYS[10])
  if refused then
    return refused
  end
  if held then
    wq_unhold(KEYS[14], id)
  end
  wq_forget(KEYS[1], KEYS[2], {id})
  redis.call('HDEL', KEYS[8], id)
  wq_keyed_replace(KEYS[15], id, before, nil, live)
  return {WQ_OK, WQ_FIRED, due}
end
if held then
  wq_unhold(KEYS[14], id)
end
wq_schedule(KEYS[1], KEYS[2], KEYS[5], ARGV[2], tonumber(redis.call('GET', KEYS[4])), id, due,
  envelope)
wq_keyed_replace(KEYS[15], id, before, envelope, live)
return {WQ_OK, WQ_SCHEDULED, due}
