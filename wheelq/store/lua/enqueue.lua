--[[ enqueue.lua — add jobs to one shard: fire each now if due, else schedule it.
KEYS[1]  {T:s}:delayed   ZSET    job id -> due ms
KEYS[2]  {T:s}:jobs      HASH    job id -> envelope
KEYS[3]  {T:s}:ready     STREAM
KEYS[4]  {T:s}:horizon   STRING  ms the leader has preloaded up to (absent: no leader)
KEYS[5]  {T:s}:inbox     LIST
ARGV[1]  topic
ARGV[2]  wake channel
ARGV[3..] five per job: id, mode ('d': value ms after TIME | 'a': value is the due ms),
          value ms, replace ('1' | '0'), envelope (msgpack)
Returns: {0, code_1, ..., code_n}, code 0 = scheduled, 1 = fired now (due <= TIME),
           2 = duplicate: pending already and replace = '0' (not written)
         {-1, key} a key has the wrong type (nothing written)
]]
local bad = wq_bad_type(KEYS[1], 'zset', KEYS[2], 'hash', KEYS[3], 'stream', KEYS[4], 'string',
  KEYS[5], 'list')
if bad then
  return {-1, bad}
end
local now = wq_now_ms()
local horizon = tonumber(redis.call('GET', KEYS[4]))
local out = {0}
for i = 3, #ARGV, 5 do
  local id, mode, value, replace, envelope = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]), ARGV[i + 3], ARGV[i + 4]
  local due = value
  if mode == 'd' then
    due = now + value
  end
  local pending = redis.call('HEXISTS', KEYS[2], id) == 1
  if pending and replace ~= '1' then
    out[#out + 1] = 2
  elseif due <= now then
    wq_fire(KEYS[3], ARGV[1], id, due, envelope)
    if pending then
      redis.call('ZREM', KEYS[1], id)
      redis.call('HDEL', KEYS[2], id)
    end
    out[#out + 1] = 1
  else
    wq_schedule(KEYS[1], KEYS[2], KEYS[5], ARGV[2], horizon, id, due, envelope)
    out[#out + 1] = 0
  end
end
return out
