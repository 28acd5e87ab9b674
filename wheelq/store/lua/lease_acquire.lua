--[[ lease_acquire.lua — take a shard's lease if it is free (SET NX PX), or renew it if ours.
A new leader starts with an empty inbox and the horizon at TIME: every job due by then is overdue
and is emitted by the leader's sweep; notes in the inbox are for jobs the sorted set holds anyway.
KEYS[1]  {T:s}:lease     STRING
KEYS[2]  {T:s}:horizon   STRING
KEYS[3]  {T:s}:inbox     LIST
ARGV[1]  the caller's lease token
ARGV[2]  lease ttl ms
Returns: {1, server_now_ms} acquired   {2, server_now_ms} already ours, renewed
         {0, holder} held by another node
]]
local now = wq_now_ms()
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  return {2, wq_fmt(now)}
end
if holder then
  return {0, holder}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('DEL', KEYS[3])
redis.call('SET', KEYS[2], wq_fmt(now), 'PX', ARGV[2])
return {1, wq_fmt(now)}
