--[[ flow_order.lua — one key's jobs, one at a time in due order, per consumer group
(wheelq.core.flow). Jobs are registered by their producer before they are written, with
their due time; a group's position is the last of them it finished. A job may start when it
is the first registered after that position (or at or before it: a finished job delivered
again runs again, at least once). Ties in due time go by job id.
KEYS[1]  wheelq:order:{topic:digest}:jobs  ZSET  job id -> due ms
KEYS[2]  wheelq:order:{topic:digest}:done  HASH  group -> "due:id" of the last job it finished
ARGV[1]  'enter' | 'done' | 'register'
ARGV[2]  group ('register': unused)
ARGV[3]  retention, ms: registrations due longer ago are dropped ('done' only)
ARGV[4..] 'enter', 'done': job id, due ms (its registered one counts when there is one);
          'register': job id, due ms, ... (pairs)
Returns: {0, 1}                 enter: the job may start; done, register: recorded
         {0, 0, head id, due}   enter: another job of the key comes first
Includes: base
]]
local function before(d1, i1, d2, i2)
  return d1 < d2 or (d1 == d2 and i1 < i2)
end
local op = ARGV[1]
if op == 'register' then
  local args = {}
  for i = 4, #ARGV, 2 do
    args[#args + 1], args[#args + 2] = ARGV[i + 1], ARGV[i]
  end
  redis.call('ZADD', KEYS[1], unpack(args))
  return {0, 1}
end
-- A job's place is the due time it was registered with: a deferred or retried job comes
-- back with a later one in its entry.
local id = ARGV[4]
local due = tonumber(redis.call('ZSCORE', KEYS[1], id) or ARGV[5])
local cd, cid = -1, ''
local mark = redis.call('HGET', KEYS[2], ARGV[2])
if mark then
  local a, b = string.match(mark, '^(%d+):(.*)$')
  cd, cid = tonumber(a), b
end
if op == 'done' then
  if before(cd, cid, due, id) then
    redis.call('HSET', KEYS[2], ARGV[2], wq_fmt(due) .. ':' .. id)
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. wq_fmt(wq_now_ms() - tonumber(ARGV[3])))
  return {0, 1}
end
if not before(cd, cid, due, id) then
  return {0, 1}
end
local offset = 0
while true do
  local page = redis.call('ZRANGE', KEYS[1], wq_fmt(math.max(cd, 0)), '+inf', 'BYSCORE', 'LIMIT',
    offset, 64, 'WITHSCORES')
  if #page == 0 then
    return {0, 1}
  end
  for i = 1, #page, 2 do
    local d = tonumber(page[i + 1])
    if before(cd, cid, d, page[i]) then
      if page[i] == id then
        return {0, 1}
      end
      return {0, 0, page[i], page[i + 1]}
    end
  end
  offset = offset + 64
end
