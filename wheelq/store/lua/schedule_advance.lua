--[[ schedule_advance.lua — record how far the planner has written each schedule's runs.
Only the shard's leader, with the current epoch, moves a cursor, and only forward; a
schedule paused or removed since it was read is left as it is.
KEYS[1]  {T:s}:lease       STRING  token of the shard's leader
KEYS[2]  {T:s}:sched_state HASH    name -> ms planned up to ("p:" + ms while paused)
KEYS[3]  {T:s}:sched_epoch STRING  the planner's fencing epoch
ARGV[1]  the caller's lease token
ARGV[2]  the caller's epoch
ARGV[3..] name, ms planned up to; ...
Returns: {0, moved}   how many cursors moved; 0 with a stale epoch (nothing written)
         {-2}         LEASE_LOST (nothing written)
Includes: status
]]
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {WQ_LEASE_LOST}
end
if (redis.call('GET', KEYS[3]) or '0') ~= ARGV[2] then
  return {WQ_OK, 0}
end
local moved = 0
for i = 3, #ARGV, 2 do
  local state = redis.call('HGET', KEYS[2], ARGV[i])
  if state and string.sub(state, 1, 2) ~= 'p:' and tonumber(state) < tonumber(ARGV[i + 1]) then
    redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
    moved = moved + 1
  end
end
return {WQ_OK, moved}
