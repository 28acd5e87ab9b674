--[[ flow_enter.lua — take one of a key's concurrency slots (wheelq.core.flow).
Holders are members of a sorted set scored by when they expire, so a worker that died
holding one frees it after the ttl.
KEYS[1]  wheelq:flow:{topic:digest}:running  ZSET  holder -> expiry, ms
ARGV[1]  holder (worker and entry)
ARGV[2]  slots
ARGV[3]  ttl, ms
Returns: {0, taken}   1: the caller holds a slot (also when it held one already)
Includes: base
]]
local now = wq_now_ms()
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', wq_fmt(now))
if not redis.call('ZSCORE', KEYS[1], ARGV[1])
    and redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  return {0, 0}
end
redis.call('ZADD', KEYS[1], wq_fmt(now + tonumber(ARGV[3])), ARGV[1])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]) + 1000)
return {0, 1}
