--[[ lease_release.lua — give a shard up (graceful stop, hand-over) if the caller holds it.
Dropping the horizon with the lease stops producers writing inbox notes nobody reads.
KEYS[1]  {T:s}:lease     STRING
KEYS[2]  {T:s}:horizon   STRING
ARGV[1]  the caller's lease token
Returns: {1} released   {-2} not held by the caller
]]
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {-2}
end
redis.call('DEL', KEYS[1], KEYS[2])
return {1}
