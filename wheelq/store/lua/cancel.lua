--[[ cancel.lua — remove a pending job.
KEYS[1]  {T:s}:delayed   ZSET
KEYS[2]  {T:s}:jobs      HASH
ARGV[1]  job id
Returns: {0, 1} cancelled   {0, 0} not pending (already fired, cancelled, or never there)
         {-1, key} wrong type
]]
local bad = wq_bad_type(KEYS[1], 'zset', KEYS[2], 'hash')
if bad then
  return {-1, bad}
end
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
return {0, removed}
