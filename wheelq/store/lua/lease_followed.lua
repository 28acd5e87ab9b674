--[[ lease_followed.lua — say that the leader's wake subscription to the shard is confirmed (or
is gone). A shard marked so whose channel then has no subscriber on this server has lost its
leader's process: lease_reap.lua frees it at once instead of after the lease's TTL.
KEYS[1]  {T:s}:lease     STRING  token of the leader
KEYS[2]  {T:s}:followed  STRING  token of a leader whose wake subscription is confirmed
ARGV[1]  the caller's lease token
ARGV[2]  1: confirmed (written only while the caller holds the lease); 0: gone (deleted only
         while it names the caller)
Returns: {0}    done
         {-2}   LEASE_LOST: confirming a lease that is not the caller's (nothing written)
]]
if ARGV[2] == '0' then
  if redis.call('GET', KEYS[2]) == ARGV[1] then
    redis.call('DEL', KEYS[2])
  end
  return {WQ_OK}
end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {WQ_LEASE_LOST}
end
redis.call('SET', KEYS[2], ARGV[1])
return {WQ_OK}
