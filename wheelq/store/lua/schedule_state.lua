--[[ schedule_state.lua — pause, resume or remove a schedule (its home shard).
Pause and remove raise the planner's epoch, so a planning round that read the schedule
before this call cannot write runs after it: the caller then fences the shards its runs
live in with the returned epoch (schedule_fence.lua) and cancels the runs written ahead.
Resume plans from now: runs that fell while it was paused are skipped, never caught up.
KEYS[1]  {T:s}:schedules   HASH    name -> definition
KEYS[2]  {T:s}:sched_state HASH    name -> ms planned up to ("p:" + ms while paused)
KEYS[3]  {T:s}:sched_epoch STRING  the planner's fencing epoch
ARGV[1]  'pause' | 'resume' | 'remove'
ARGV[2]  name
Returns: {0, found, epoch, definition}   found = 0: no such schedule (nothing written);
           epoch: the new epoch (pause, remove) or the current one (resume); definition:
           the schedule as it was (false if none)
         {-1, key}   WRONG_TYPE (nothing written)
Includes: base, status
]]
local wrong = wq_wrong_type(KEYS[1], 'hash', KEYS[2], 'hash', KEYS[3], 'string')
if wrong then return wrong end
local state = redis.call('HGET', KEYS[2], ARGV[2])
local definition = redis.call('HGET', KEYS[1], ARGV[2])
if not state then
  return {WQ_OK, 0, 0, definition}
end
local paused = string.sub(state, 1, 2) == 'p:'
if ARGV[1] == 'resume' then
  if paused then
    redis.call('HSET', KEYS[2], ARGV[2], wq_fmt(wq_now_ms()))
  end
  return {WQ_OK, 1, tonumber(redis.call('GET', KEYS[3]) or '0'), definition}
end
if ARGV[1] == 'pause' then
  if not paused then
    redis.call('HSET', KEYS[2], ARGV[2], 'p:' .. state)
  end
else
  redis.call('HDEL', KEYS[1], ARGV[2])
  redis.call('HDEL', KEYS[2], ARGV[2])
end
return {WQ_OK, 1, redis.call('INCR', KEYS[3]), definition}
