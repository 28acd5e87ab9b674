--[[ lease_renew.lua — compare-and-extend: renew the lease only while the caller holds it.
KEYS[1]  {T:s}:lease     STRING  token of the leader
KEYS[2]  {T:s}:horizon   STRING  ms the leader has preloaded up to
ARGV[1]  the caller's lease token
ARGV[2]  lease ttl, ms
Returns: {0}    renewed (lease and horizon expire ARGV[2] ms from now)
         {-2}   LEASE_LOST: not held by the caller (nothing written)
]]
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {WQ_LEASE_LOST}
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return {WQ_OK}
