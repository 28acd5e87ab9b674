--[[ trim.lua — trim a shard's history: ready-stream entries every group has acked, once past
retention or while the history is over its byte budget, with the records that name them, and
cancellations past retention.
An entry is kept while any group has it pending or has not been delivered it yet, so trimming
never deletes an entry some group has not acked (docs/architecture.md, invariant 5). A stream
no group reads yet is not trimmed at all. Also forgets consumers that hold nothing and have
been idle long.
Byte budget: when MEMORY USAGE of the stream, the history hash and the cancellations together
is over 90% of ARGV[4], acked entries are trimmed oldest first whatever their age, as many as
the excess over 80% of the budget is worth at the average size, and cancellations in the same
proportion.
KEYS[1]  {T:s}:ready     STREAM  fired jobs
KEYS[2]  {T:s}:history   HASH    job id -> latest entry; "id<US>group" -> the group's record
KEYS[3]  {T:s}:cancelled ZSET    job id -> ms it was cancelled
ARGV[1]  retention, ms: only entries older than TIME - this are trimmed (byte budget aside)
ARGV[2]  most entries (and most cancellations) to trim in this call
ARGV[3]  consumer idle, ms: consumers idle longer than this with nothing pending are deleted
ARGV[4]  byte budget of the shard's history, bytes (0: none)
Returns: {0, trimmed, more, consumers_deleted}   more = 1 when trimmable entries remain
         {-1, key}   WRONG_TYPE (nothing written)
]]
local bad = wq_bad_type(KEYS[1], 'stream', KEYS[2], 'hash', KEYS[3], 'zset')
if bad then
  return {WQ_WRONG_TYPE, bad}
end
local now, limit, budget = wq_now_ms(), tonumber(ARGV[2]), tonumber(ARGV[4])
local expired = wq_fmt(now - tonumber(ARGV[1]))
local stream_len = redis.call('XLEN', KEYS[1])
-- The byte budget: the share of the records to drop beyond what retention drops.
local excess = 0
if budget > 0 then
  local usage = 0
  for i = 1, 3 do
    usage = usage + (redis.call('MEMORY', 'USAGE', KEYS[i]) or 0)
  end
  -- From 90% of the budget down to 80%, so that it stays within the budget while it grows
  -- until the next trim round (and a trimmed stream or hash returns less memory than the
  -- entries' average size: deleted entries of a stream node are freed with the node).
  if usage > 0.9 * budget then
    excess = (usage - 0.8 * budget) / usage
  end
end
local function forget_cancels(n)
  if n > 0 then
    wq_multi('ZREM', KEYS[3], redis.call('ZRANGE', KEYS[3], 0, n - 1))
  end
end
forget_cancels(#redis.call('ZRANGE', KEYS[3], '-inf', '(' .. expired, 'BYSCORE', 'LIMIT', 0,
  limit))
if excess > 0 then
  forget_cancels(math.min(limit, math.ceil(excess * redis.call('ZCARD', KEYS[3]))))
end
if stream_len == 0 then
  return {WQ_OK, 0, 0, 0}
end
local groups = redis.call('XINFO', 'GROUPS', KEYS[1])
if #groups == 0 then
  return {WQ_OK, 0, 0, 0}
end
local bound, acked = expired .. '-0', nil
local forgotten = 0
local names = {}
for _, flat in ipairs(groups) do
  local g = wq_fields(flat)
  names[#names + 1] = g['name']
  -- entries after last-delivered-id are not delivered to this group yet: the bound is the
  -- next possible id (kept one lower when seq is too large for a Lua number to add 1 exactly)
  local last = wq_id(g['last-delivered-id'])
  local after = g['last-delivered-id']
  if last[2] < 2 ^ 53 then
    after = wq_fmt(last[1]) .. '-' .. wq_fmt(last[2] + 1)
  end
  if not acked or wq_id_lt(after, acked) then
    acked = after
  end
  if tonumber(g['pending']) > 0 then
    local oldest = redis.call('XPENDING', KEYS[1], g['name'])[2]
    if wq_id_lt(oldest, acked) then
      acked = oldest
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
local count = limit
if excess > 0 then
  bound = acked
  count = math.min(limit, math.ceil(excess * stream_len))
elseif wq_id_lt(acked, bound) then
  bound = acked
end
if bound == '0-0' then
  return {WQ_OK, 0, 0, forgotten}
end
-- XTRIM MINID removes ids < the threshold: at most `count` of them per call.
local page = redis.call('XRANGE', KEYS[1], '-', '(' .. bound, 'COUNT', count + 1)
if #page == 0 then
  return {WQ_OK, 0, 0, forgotten}
end
local threshold, more, last = bound, 0, #page
if #page > count then
  threshold, more, last = page[#page][1], 1, count
end
-- The records naming a trimmed entry go with it (a later firing's records stay).
local drop = {}
local function forget_record(field, entry)
  local raw = redis.call('HGET', KEYS[2], field)
  if raw == entry or (raw and (wq_read_record(raw) or {})[2] == entry) then
    drop[#drop + 1] = field
  end
end
for i = 1, last do
  local entry, f = page[i][1], wq_fields(page[i][2])
  if f['id'] then
    if f['group'] then
      forget_record(f['id'] .. WQ_US .. f['group'], entry)
    else
      forget_record(f['id'], entry)
      for _, name in ipairs(names) do
        forget_record(f['id'] .. WQ_US .. name, entry)
      end
    end
  end
end
wq_multi('HDEL', KEYS[2], drop)
local trimmed = redis.call('XTRIM', KEYS[1], 'MINID', threshold)
return {WQ_OK, trimmed, more, forgotten}
