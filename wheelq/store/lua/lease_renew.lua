--[[ lease_renew.lua — compare-and-extend: renew the lease only while the caller holds it.
The form for servers without SET ... IFEQ (Redis < 8.4, Valkey < 8.1), which does the same in
one command (wheelq.store.leases.lease_renew_ifeq). The horizon is not touched: it expires by
itself a lease ttl after the time it names (preload.lua).
KEYS[1]  {T:s}:lease     STRING  token of the leader
ARGV[1]  the caller's lease token
ARGV[2]  lease ttl, ms
Returns: {0}    renewed (the lease expires ARGV[2] ms from now)
         {-2}   LEASE_LOST: not held by the caller (nothing written)
Includes: status
]]
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {WQ_LEASE_LOST}
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {WQ_OK}
