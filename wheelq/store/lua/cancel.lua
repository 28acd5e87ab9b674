--[[ cancel.lua — remove a pending job.
KEYS[1]  {T:s}:delayed   ZSET    job id -> due ms
KEYS[2]  {T:s}:jobs      HASH    job id -> envelope
KEYS[3]  {T:s}:cancelled ZSET    job id -> Redis ms it was cancelled (the job's history)
ARGV[1]  job id
Returns: {0, removed}   removed = 1 cancelled, 0 not pending (already fired, cancelled, or
           never there)
         {-1, key}      WRONG_TYPE (nothing written)
]]
local bad = wq_bad_type(KEYS[1], 'zset', KEYS[2], 'hash', KEYS[3], 'zset')
if bad then
  return {WQ_WRONG_TYPE, bad}
end
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
if removed == 1 then
  redis.call('ZADD', KEYS[3], wq_fmt(wq_now_ms()), ARGV[1])
end
return {WQ_OK, removed}
