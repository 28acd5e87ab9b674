--[[ lease_renew.lua — compare-and-extend: renew the lease only while the caller holds it.
KEYS[1]  {T:s}:lease     STRING
KEYS[2]  {T:s}:horizon   STRING
ARGV[1]  the caller's lease token
ARGV[2]  lease ttl ms
Returns: {1} renewed   {-2} not held by the caller (lost)
]]
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {-2}
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return {1}
