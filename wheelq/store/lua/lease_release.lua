--[[ lease_release.lua — give a shard up (graceful stop, hand-over) if the caller holds it.
Dropping the horizon with the lease stops producers writing inbox notes nobody reads.
KEYS[1]  {T:s}:lease     STRING  token of the leader
KEYS[2]  {T:s}:horizon   STRING  ms the leader has preloaded up to
KEYS[3]  {T:s}:followed  STRING  the mark of the leader's liveness connection (lease_followed.lua)
ARGV[1]  the caller's lease token
Returns: {0}    released
         {-2}   LEASE_LOST: not held by the caller (nothing written)
Includes: status
]]
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {WQ_LEASE_LOST}
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
return {WQ_OK}
