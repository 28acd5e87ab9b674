--[[ lease_followed.lua — register the leader's liveness connection for the shard: its wake
subscription is confirmed (or it is gone). A shard so marked whose channel then has no
subscriber on this server for the failover grace has lost its leader's process: lease_reap.lua
frees it then instead of after the lease's TTL. Registering again (a reconnected leader) writes
a plain mark, which ends a grace lease_reap.lua started ("token ms").
KEYS[1]  {T:s}:lease     STRING  token of the leader
KEYS[2]  {T:s}:followed  STRING  the mark: the leader's token ("token ms" once seen gone)
ARGV[1]  the caller's lease token
ARGV[2]  1: confirmed (written only while the caller holds the lease); 0: gone (deleted only
         while it is the caller's)
Returns: {0}    done
         {-2}   LEASE_LOST: confirming a lease that is not the caller's (nothing written)
Includes: lease, status
]]
if ARGV[2] == '0' then
  if wq_marked(redis.call('GET', KEYS[2]), ARGV[1]) then
    redis.call('DEL', KEYS[2])
  end
  return {WQ_OK}
end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {WQ_LEASE_LOST}
end
redis.call('SET', KEYS[2], ARGV[1])
return {WQ_OK}
