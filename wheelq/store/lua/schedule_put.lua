--[[ schedule_put.lua — create or update a recurring schedule in its home shard.
A new schedule is planned from now (Redis TIME): runs before its creation never count as
missed. An update keeps the state (paused or not, planned up to): it takes effect from the
first run not yet written.
KEYS[1]  {T:s}:schedules   HASH  name -> definition (msgpack)
KEYS[2]  {T:s}:sched_state HASH  name -> ms planned up to ("p:" + ms while paused)
ARGV[1]  name
ARGV[2]  definition
ARGV[3]  '0': create or update; '1': create only (an existing schedule is left as it is);
         '2': update only if the stored definition is ARGV[4] byte for byte (a sync's
         compare-and-set: of several racing, one writes)
ARGV[4]  the definition expected (ARGV[3] = '2')
Returns: {0, created, state, written}   created = 1 new, 0 updated (or left as it was);
           state: the schedule's state after the call; written = 1 when the definition was
           written, 0 when left as it was (ARGV[3] '1' or '2')
         {-1, key}              WRONG_TYPE (nothing written)
Includes: base, status
]]
local wrong = wq_wrong_type(KEYS[1], 'hash', KEYS[2], 'hash')
if wrong then return wrong end
local state = redis.call('HGET', KEYS[2], ARGV[1])
if state and ARGV[3] == '1' then
  return {WQ_OK, 0, state, 0}
end
if ARGV[3] == '2' and redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[4] then
  return {WQ_OK, 0, state or '', 0}
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
if state then
  return {WQ_OK, 0, state, 1}
end
state = wq_fmt(wq_now_ms())
redis.call('HSET', KEYS[2], ARGV[1], state)
return {WQ_OK, 1, state, 1}
