--[[ reschedule.lua — move a pending job to a new due time (earlier or later); fire it if due.
KEYS[1]  {T:s}:delayed   ZSET    job id -> due ms
KEYS[2]  {T:s}:jobs      HASH    job id -> envelope
KEYS[3]  {T:s}:ready     STREAM  fired jobs
KEYS[4]  {T:s}:horizon   STRING  ms the leader has preloaded up to (absent: no leader)
KEYS[5]  {T:s}:inbox     LIST    "due:id" notes for the leader
KEYS[6]  {T:s}:history   HASH    job id -> its latest entry (when fired now)
KEYS[7]  {T:s}:history_old HASH  the history's previous generation (read by wq_fired)
KEYS[8]  {T:s}:limits    HASH    "ready": due now, the job fires only while the stream has room
         under it, else it is moved to its due time (wheelq.core.limits)
KEYS[9]  {T:s}:callbacks STREAM  fired jobs that carry a callback (wq_fire)
ARGV[1]  topic
ARGV[2]  wake channel
ARGV[3]  job id
ARGV[4]  mode: 'd' (ARGV[5] ms after TIME) | 'a' (ARGV[5] is the due ms)
ARGV[5]  value, ms
Returns: {0, placed}   0 SCHEDULED (moved; due now too, with the stream at its limit), 1 FIRED now, 3 NOT_PENDING (nothing written)
         {-1, key}   WRONG_TYPE (nothing written)
         {-3, topic, id, why}   MALFORMED: due now, but its envelope cannot be decoded (nothing
           written; the scheduler dead-letters it when it comes due)
]]
local bad = wq_bad_type(KEYS[1], 'zset', KEYS[2], 'hash', KEYS[3], 'stream', KEYS[4], 'string',
  KEYS[5], 'list')
if bad then
  return {WQ_WRONG_TYPE, bad}
end
local id = ARGV[3]
local envelope = redis.call('HGET', KEYS[2], id)
if not envelope or not redis.call('ZSCORE', KEYS[1], id) then
  return {WQ_OK, WQ_NOT_PENDING}
end
local now = wq_now_ms()
local due = tonumber(ARGV[5])
if ARGV[4] == 'd' then
  due = now + due
end
local room = due <= now and wq_room(redis.call('HGET', KEYS[8], 'ready'), {KEYS[3], KEYS[9]})
if due <= now and not (room and room <= 0) then
  local refused = wq_fire_now(KEYS[3], KEYS[6], KEYS[7], ARGV[1], id, due, envelope, KEYS[9])
  if refused then
    return refused
  end
  wq_forget(KEYS[1], KEYS[2], {id})
  return {WQ_OK, WQ_FIRED}
end
wq_schedule(KEYS[1], KEYS[2], KEYS[5], ARGV[2], tonumber(redis.call('GET', KEYS[4])), id, due, envelope)
return {WQ_OK, WQ_SCHEDULED}
