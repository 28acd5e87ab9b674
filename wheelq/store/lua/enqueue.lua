--[[ enqueue.lua — add jobs to one shard: fire each now if due, else schedule it.
Batched: one HMGET finds the pending ids, one HSET and one ZADD store every scheduled job, so
the cost per job is a few table operations rather than several Redis calls.
KEYS[1]  {T:s}:delayed   ZSET    job id -> due ms
KEYS[2]  {T:s}:jobs      HASH    job id -> envelope
KEYS[3]  {T:s}:ready     STREAM  fired jobs
KEYS[4]  {T:s}:horizon   STRING  ms the leader has preloaded up to (absent: no leader)
KEYS[5]  {T:s}:inbox     LIST    "due:id" notes for the leader
ARGV[1]  topic
ARGV[2]  wake channel
ARGV[3..] five per job: id, mode ('d': value ms after TIME | 'a': value is the due ms),
          value ms, replace ('1' | '0'), envelope (msgpack)
Returns: {0, placed_1, ..., placed_n}   per job, in order: 0 SCHEDULED, 1 FIRED now
           (due <= TIME), 2 DUPLICATE: pending already and replace = '0' (not written)
         {-1, key}   WRONG_TYPE (nothing written)
         {-3, topic, id, why}   MALFORMED: an envelope due now cannot be decoded (a caller's
           bug: wheelq writes none); jobs before it that fired are in the stream, nothing
           else is written
]]
-- Type checks: the sorted set, the stream and the inbox by TYPE (a job must not be scheduled
-- into a shard it could never fire from); the horizon and the hash by their first read.
local bad = wq_bad_type(KEYS[1], 'zset', KEYS[3], 'stream', KEYS[5], 'list')
if bad then
  return {WQ_WRONG_TYPE, bad}
end
local horizon = redis.pcall('GET', KEYS[4])
if type(horizon) == 'table' and horizon.err then
  return {WQ_WRONG_TYPE, KEYS[4]}
end
horizon = tonumber(horizon)
local now = wq_now_ms()
local ids = {}
for i = 3, #ARGV, 5 do
  ids[#ids + 1] = ARGV[i]
end
if #ids == 0 then
  return {WQ_OK}
end
-- Jobs are applied in order, as if one by one; the writes are gathered and made at the end.
local pending, final, order = {}, {}, {}
local flags = wq_multi('HMGET', KEYS[2], ids, redis.pcall)
if flags.err then
  return {WQ_WRONG_TYPE, KEYS[2]}
end
for n, flag in ipairs(flags) do
  pending[ids[n]] = flag ~= false
end
local out, notes = {WQ_OK}, {}
for n = 1, #ids do
  local i = 3 + (n - 1) * 5
  local id, value, envelope = ARGV[i], tonumber(ARGV[i + 2]), ARGV[i + 4]
  local due = value
  if ARGV[i + 1] == 'd' then
    due = now + value
  end
  if final[id] == nil then
    order[#order + 1] = id
  end
  if pending[id] and ARGV[i + 3] ~= '1' then
    out[#out + 1] = WQ_DUPLICATE
  elseif due <= now then
    local refused = wq_fire_now(KEYS[3], ARGV[1], id, due, envelope)
    if refused then
      return refused
    end
    pending[id], final[id] = false, false
    out[#out + 1] = WQ_FIRED
  else
    pending[id], final[id] = true, {due, envelope}
    if horizon and due <= horizon then
      notes[#notes + 1] = wq_note(due, id)
    end
    out[#out + 1] = WQ_SCHEDULED
  end
end
local hset, zadd, gone = {}, {}, {}
for _, id in ipairs(order) do
  local f = final[id]
  if f then
    hset[#hset + 1], hset[#hset + 2] = id, f[2]
    zadd[#zadd + 1], zadd[#zadd + 2] = wq_fmt(f[1]), id
  elseif f == false then
    gone[#gone + 1] = id
  end
end
wq_forget(KEYS[1], KEYS[2], gone)
if #hset > 0 then
  wq_multi('HSET', KEYS[2], hset)
  wq_multi('ZADD', KEYS[1], zadd)
end
if #notes > 0 then
  wq_multi('RPUSH', KEYS[5], notes)
  for _, note in ipairs(notes) do
    redis.call('PUBLISH', ARGV[2], note)
  end
end
return out
