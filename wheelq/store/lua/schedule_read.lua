--[[ schedule_read.lua — a shard's schedules, their states and the planner's epoch, read at
one instant (a planner that sees an epoch also sees the pauses and removals that raised it).
KEYS[1]  {T:s}:schedules   HASH    name -> definition
KEYS[2]  {T:s}:sched_state HASH    name -> ms planned up to ("p:" + ms while paused)
KEYS[3]  {T:s}:sched_epoch STRING  the planner's fencing epoch
ARGV[1]  a name, or '' for every schedule of the shard
Returns: {0, epoch, {name, definition, state, ...}}   (a name not found: an empty list)
         {-1, key}   WRONG_TYPE
Includes: status
]]
local wrong = wq_wrong_type(KEYS[1], 'hash', KEYS[2], 'hash', KEYS[3], 'string')
if wrong then return wrong end
local epoch = tonumber(redis.call('GET', KEYS[3]) or '0')
local out = {}
local names
if ARGV[1] ~= '' then
  names = {ARGV[1]}
else
  names = redis.call('HKEYS', KEYS[1])
end
for _, name in ipairs(names) do
  local definition = redis.call('HGET', KEYS[1], name)
  local state = redis.call('HGET', KEYS[2], name)
  if definition and state then
    out[#out + 1], out[#out + 2], out[#out + 3] = name, definition, state
  end
end
return {WQ_OK, epoch, out}
