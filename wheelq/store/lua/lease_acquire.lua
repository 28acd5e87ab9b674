--[[ lease_acquire.lua — take a shard's lease if it is free (SET NX PX), or renew it if ours.
A new leader starts with an empty inbox and the horizon at TIME: every job due by then is overdue
and is emitted by the leader's sweep; notes in the inbox are for jobs the sorted set holds anyway.
It is not "followed" until its wake subscription is confirmed (lease_followed.lua).
KEYS[1]  {T:s}:lease     STRING  token of the leader
KEYS[2]  {T:s}:horizon   STRING  ms the leader has preloaded up to
KEYS[3]  {T:s}:inbox     LIST    "due:id" notes for the leader
KEYS[4]  {T:s}:followed  STRING  the mark of the leader's liveness connection (lease_followed.lua)
ARGV[1]  the caller's lease token
ARGV[2]  lease ttl, ms
Returns: {0, held, new, server_now_ms, holder}
           held    1 when the caller holds the lease after the call, 0 when another node does
                   (nothing written)
           new     1 when it was just acquired, 0 when it was ours already (renewed)
           holder  the token of the node holding the lease
Includes: base, status
]]
local now = wq_fmt(wq_now_ms())
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  return {WQ_OK, 1, 0, now, holder}
end
if holder then
  return {WQ_OK, 0, 0, now, holder}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('DEL', KEYS[3], KEYS[4])
redis.call('SET', KEYS[2], now, 'PX', ARGV[2])
return {WQ_OK, 1, 1, now, ARGV[1]}
