--[[ schedule_claim.lua — a shard's leader becomes the planner of its schedules: it takes a
new fencing epoch, if the epoch is still the one it read with the schedules.
KEYS[1]  {T:s}:lease       STRING  token of the shard's leader
KEYS[2]  {T:s}:sched_epoch STRING  the planner's fencing epoch
ARGV[1]  the caller's lease token
ARGV[2]  the epoch the caller read
Returns: {0, epoch}   the caller's new epoch; 0: the epoch moved on since it was read (read
           again; nothing written)
         {-2}         LEASE_LOST (nothing written)
         {-1, key}    WRONG_TYPE (nothing written)
Includes: status
]]
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {WQ_LEASE_LOST}
end
local wrong = wq_wrong_type(KEYS[2], 'string')
if wrong then return wrong end
if (redis.call('GET', KEYS[2]) or '0') ~= ARGV[2] then
  return {WQ_OK, 0}
end
return {WQ_OK, redis.call('INCR', KEYS[2])}
