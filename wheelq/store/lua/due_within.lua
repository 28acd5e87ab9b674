--[[ due_within.lua — one shard's pending jobs due at or before each of some times, overdue
ones included, in the sorted set and the far tier (wheelq.core.forecast; docs/architecture.md,
"The far tier"). Read only. A ZCOUNT a time; while the far tier holds jobs, the live counts
of the leaves that end by the time, and the live records due by it of the one leaf it falls
in (at most 512): O(log n + leaves starting by the last time) whatever the backlog.
KEYS[1]  {T:s}:delayed   ZSET    job id -> due ms
KEYS[2]  {T:s}:far       HASH    the far tier's meta (wq_far_state); its :buckets, :live and
         leaves are read
ARGV[1..] times, ms, ascending
Returns: {0, count, ...}   per time, in order
Includes: far_tier, status
]]
local far = wq_far_state(KEYS[2])
local leaves, live = {}, {}
if far.entries > 0 then
  leaves = redis.call('ZRANGE', KEYS[2] .. ':buckets', '-inf', ARGV[#ARGV], 'BYSCORE')
  if #leaves > 0 then
    live = redis.call('HMGET', KEYS[2] .. ':live', unpack(leaves))
  end
end
-- The live records of `leaf` (at `start`, of `level`) due at or before `by`.
local function due_in(leaf, start, level, by)
  local n = 0
  for position, record in ipairs(redis.call('LRANGE', far:key(leaf), 0, -1)) do
    local id, due = far.unpack(record, start, level)
    if due <= by then
      local fp, h = far.fp(id)
      if redis.call('HGET', far:index(h), fp) == far.loc(leaf, position - 1) then
        n = n + 1
      end
    end
  end
  return n
end
local out = {WQ_OK}
for i = 1, #ARGV do
  local by = tonumber(ARGV[i])
  local n = redis.call('ZCOUNT', KEYS[1], '-inf', ARGV[i])
  for j, raw in ipairs(leaves) do
    local leaf = tonumber(raw)
    local start, level = far:leaf(leaf)
    if start > by then
      break
    end
    if start + far:span(level) - 1 <= by then
      n = n + (tonumber(live[j]) or 0)
    else
      n = n + due_in(leaf, start, level, by)
    end
  end
  out[i + 1] = n
end
return out
