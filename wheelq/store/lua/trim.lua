--[[ trim.lua — trim a ready stream: drop entries every group has acked once past retention.
An entry is kept while any group has it pending or has not been delivered it yet, so trimming
never deletes an entry some group has not acked (docs/architecture.md, invariant 5). A stream
no group reads yet is not trimmed at all. Also forgets consumers that hold nothing and have
been idle long.
KEYS[1]  {T:s}:ready     STREAM  fired jobs
ARGV[1]  retention, ms: only entries older than TIME - this are trimmed
ARGV[2]  most entries to trim in this call
ARGV[3]  consumer idle, ms: consumers idle longer than this with nothing pending are deleted
Returns: {0, trimmed, more, consumers_deleted}   more = 1 when trimmable entries remain
         {-1, key}   WRONG_TYPE (nothing written)
]]
local bad = wq_bad_type(KEYS[1], 'stream')
if bad then
  return {WQ_WRONG_TYPE, bad}
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {WQ_OK, 0, 0, 0}
end
local bound = wq_fmt(wq_now_ms() - tonumber(ARGV[1])) .. '-0'
local groups = redis.call('XINFO', 'GROUPS', KEYS[1])
if #groups == 0 then
  return {WQ_OK, 0, 0, 0}
end
local forgotten = 0
for _, flat in ipairs(groups) do
  local g = wq_fields(flat)
  -- entries after last-delivered-id are not delivered to this group yet: the bound is the
  -- next possible id (kept one lower when seq is too large for a Lua number to add 1 exactly)
  local last = wq_id(g['last-delivered-id'])
  local after = g['last-delivered-id']
  if last[2] < 2 ^ 53 then
    after = wq_fmt(last[1]) .. '-' .. wq_fmt(last[2] + 1)
  end
  if wq_id_lt(after, bound) then
    bound = after
  end
  if tonumber(g['pending']) > 0 then
    local oldest = redis.call('XPENDING', KEYS[1], g['name'])[2]
    if wq_id_lt(oldest, bound) then
      bound = oldest
    end
  end
  for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], g['name'])) do
    local consumer = wq_fields(c)
    if tonumber(consumer['pending']) == 0 and tonumber(consumer['idle']) > tonumber(ARGV[3]) then
      redis.call('XGROUP', 'DELCONSUMER', KEYS[1], g['name'], consumer['name'])
      forgotten = forgotten + 1
    end
  end
end
if bound == '0-0' then
  return {WQ_OK, 0, 0, forgotten}
end
-- XTRIM MINID removes ids < the threshold: at most ARGV[2] of them per call.
local limit = tonumber(ARGV[2])
local page = redis.call('XRANGE', KEYS[1], '-', '(' .. bound, 'COUNT', limit + 1)
if #page == 0 then
  return {WQ_OK, 0, 0, forgotten}
end
local threshold, more = bound, 0
if #page > limit then
  threshold, more = page[#page][1], 1
end
local trimmed = redis.call('XTRIM', KEYS[1], 'MINID', threshold)
return {WQ_OK, trimmed, more, forgotten}
