--[[ schedule_fence.lua — fence schedules' writers out of one shard: a write with an epoch
below the one recorded here is refused (materialize.lua). A new planner fences with 'keep'
(runs already written stay known, so none is written twice); a pause or removal with
'reset' (the runs written ahead are cancelled by the caller, and may be written again after
a resume).
KEYS[1]  {T:s}:sched_marks HASH  name -> "epoch:ms of the latest run written here"
ARGV[1]  epoch
ARGV[2]  'keep' | 'reset'
ARGV[3..] names
Returns: {0, ms, ...}   per name, the latest run written here before the call (0: none)
         {-1, key}      WRONG_TYPE (nothing written)
Includes: base, status
]]
local wrong = wq_wrong_type(KEYS[1], 'hash')
if wrong then return wrong end
local epoch = tonumber(ARGV[1])
local out = {WQ_OK}
for i = 3, #ARGV do
  local mark = redis.call('HGET', KEYS[1], ARGV[i])
  local e, last = 0, 0
  if mark then
    local a, b = string.match(mark, '^(%d+):(%d+)$')
    e, last = tonumber(a), tonumber(b)
  end
  local keep = last
  if ARGV[2] == 'reset' then
    keep = 0
  end
  redis.call('HSET', KEYS[1], ARGV[i], wq_fmt(math.max(e, epoch)) .. ':' .. wq_fmt(keep))
  out[#out + 1] = last
end
return out
