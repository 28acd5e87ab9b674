--[[ trim.lua — trim a shard's history: acked entries of its two streams (ready, callbacks)
past retention or over the byte budget, the job records by generation (UNLINK the old one
once both streams are past its <US>upto, then RENAME the current one), and cancellations
past retention; also forgets idle consumers that hold nothing. An entry any group has not
acked is kept (docs/architecture.md, "Job history", invariant 5).
KEYS[1]  {T:s}:ready       STREAM  fired jobs
KEYS[2]  {T:s}:history     HASH    job id -> latest entry; "id<US>group" -> the group's record
KEYS[3]  {T:s}:history_old HASH    the previous generation, and <US>upto
KEYS[4]  {T:s}:cancelled   ZSET    job id -> ms it was cancelled
KEYS[5]  {T:s}:callbacks   STREAM  fired jobs that carry a callback (trimmed as KEYS[1] is)
KEYS[6]  {T:s}:limits    HASH    "events", "events_age": the topic's events setting (wheelq.core.events)
KEYS[7]  {T:s}:events    STREAM  job events while the topic has them on (wq_event)
ARGV[1]  retention, ms: only entries older than TIME - this are trimmed (byte budget aside)
ARGV[2]  most entries (and most cancellations) to trim in this call
ARGV[3]  consumer idle, ms: consumers idle longer than this with nothing pending are deleted
ARGV[4]  byte budget of the shard's history, bytes (0: none); the keys' MEMORY USAGE plus the
         results' bytes each generation counts (<US>results, written by ack.lua)
Returns: {0, trimmed, more, consumers_deleted}   both streams together; more = 1 when
           trimmable entries remain
         {-1, key}   WRONG_TYPE (nothing written)
Includes: base, history, status
]]
local wrong = wq_wrong_type(KEYS[1], 'stream', KEYS[2], 'hash', KEYS[3], 'hash', KEYS[4], 'zset',
  KEYS[5], 'stream')
if wrong then return wrong end
local STREAMS = {KEYS[1], KEYS[5]}
local now, limit, budget = wq_now_ms(), tonumber(ARGV[2]), tonumber(ARGV[4])
local expired = wq_fmt(now - tonumber(ARGV[1]))
-- The byte budget: the share of the records to drop beyond what retention drops.
local excess, usage = 0, 0
if budget > 0 then
  for i = 1, 5 do
    usage = usage + (redis.call('MEMORY', 'USAGE', KEYS[i]) or 0)
  end
  for i = 2, 3 do -- the results, counted as written: MEMORY USAGE samples a hash
    usage = usage + (tonumber(redis.call('HGET', KEYS[i], WQ_RESULTS)) or 0)
  end
  -- From 90% of the budget (room for the growth until the next trim round); the excess over
  -- 80% is the share of cancellations to drop (entries and records go by generation, below).
  if usage > 0.9 * budget then
    excess = (usage - 0.8 * budget) / usage
  end
end
local function forget_cancels(n)
  if n > 0 then
    wq_multi('ZREM', KEYS[4], redis.call('ZRANGE', KEYS[4], 0, n - 1))
  end
end
forget_cancels(#redis.call('ZRANGE', KEYS[4], '-inf', '(' .. expired, 'BYSCORE', 'LIMIT', 0,
  limit))
if excess > 0 then
  forget_cancels(math.min(limit, math.ceil(excess * redis.call('ZCARD', KEYS[4]))))
end
-- The first (or, with 'XREVRANGE' and '+', '-', the last) entry id of the streams taken
-- together: the earliest first, the latest last; nil when both are empty.
local function edge(cmd, from, to, earliest)
  local found
  for _, stream in ipairs(STREAMS) do
    local e = redis.call(cmd, stream, from, to, 'COUNT', 1)[1]
    if e and (not found or wq_id_lt(e[1], found) == earliest) then
      found = e[1]
    end
  end
  return found
end
-- Generations: drop the old one once the streams' oldest entry is past its upto. Then, with no
-- old generation left, the current one takes its place (its upto: the streams' last entry)
-- once it has been current for the retention, or holds enough of the byte budget to be worth
-- dropping later (45%: half of the 90% that starts trimming for bytes), or when `force`d.
local function turn_generations(force)
  if redis.call('EXISTS', KEYS[3]) == 1 then
    local upto = redis.call('HGET', KEYS[3], WQ_UPTO) or '0-0'
    local first = edge('XRANGE', '-', '+', true)
    if first and not wq_id_lt(upto, first) then
      return
    end
    redis.call('UNLINK', KEYS[3])
  end
  local since = redis.call('HGET', KEYS[2], WQ_SINCE)
  if redis.call('HLEN', KEYS[2]) <= (since and 1 or 0) then
    return
  end
  if not since and not force then -- records written before any turn: current from now on
    redis.call('HSET', KEYS[2], WQ_SINCE, wq_fmt(now))
    since = wq_fmt(now)
  end
  if not force and now - tonumber(since) < tonumber(ARGV[1])
      and not (budget > 0 and usage >= 0.45 * budget) then
    return
  end
  local last = edge('XREVRANGE', '+', '-', false)
  redis.call('RENAME', KEYS[2], KEYS[3])
  redis.call('HSET', KEYS[3], WQ_UPTO, last or '0-0')
  redis.call('HSET', KEYS[2], WQ_SINCE, wq_fmt(now))
end
-- Trim one stream: {trimmed, more, consumers deleted}.
local function trim_stream(stream)
  local stream_len = redis.call('XLEN', stream)
  if stream_len == 0 then
    return 0, 0, 0
  end
  local groups = redis.call('XINFO', 'GROUPS', stream)
  if #groups == 0 then
    return 0, 0, 0
  end
  local bound, acked = expired .. '-0', nil
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
    if not acked or wq_id_lt(after, acked) then
      acked = after
    end
    if tonumber(g['pending']) > 0 then
      local oldest = redis.call('XPENDING', stream, g['name'])[2]
      if wq_id_lt(oldest, acked) then
        acked = oldest
      end
    end
    for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', stream, g['name'])) do
      local consumer = wq_fields(c)
      if tonumber(consumer['pending']) == 0 and tonumber(consumer['idle']) > tonumber(ARGV[3]) then
        redis.call('XGROUP', 'DELCONSUMER', stream, g['name'], consumer['name'])
        forgotten = forgotten + 1
      end
    end
  end
  if excess > 0 then
    -- Over the budget: every acked entry up to the old generation's upto (whatever its age),
    -- so that generation can go (when there is none, the current one becomes it first).
    if redis.call('EXISTS', KEYS[3]) == 0 then
      turn_generations(true)
    end
    local upto = wq_id(redis.call('HGET', KEYS[3], WQ_UPTO) or '0-0')
    local past = wq_fmt(upto[1]) .. '-' .. wq_fmt(upto[2] + 1)
    if wq_id_lt(bound, past) then -- and never less than retention trims
      bound = past
    end
  end
  if wq_id_lt(acked, bound) then
    bound = acked
  end
  if bound == '0-0' then
    return 0, 0, forgotten
  end
  -- XTRIM MINID removes the ids < threshold. About `limit` of them per call: the threshold is
  -- capped at the ms the stream's average rate reaches `limit` entries past its first one
  -- (entries are not read back: their ids say when they were added).
  local trimmed, more = 0, 0
  local first = redis.call('XRANGE', stream, '-', '+', 'COUNT', 1)[1]
  if first and wq_id_lt(first[1], bound) then
    local threshold = bound
    if stream_len > limit then
      local latest = redis.call('XREVRANGE', stream, '+', '-', 'COUNT', 1)[1]
      local from = wq_id(first[1])[1]
      local span = math.max(1, math.ceil((wq_id(latest[1])[1] - from) * limit / (stream_len - 1)))
      local cap = wq_fmt(from + span) .. '-0'
      if wq_id_lt(cap, threshold) then
        threshold, more = cap, 1
      end
    end
    trimmed = redis.call('XTRIM', stream, 'MINID', threshold)
  end
  return trimmed, more, forgotten
end
local out = {WQ_OK, 0, 0, 0}
for _, stream in ipairs(STREAMS) do
  local trimmed, more, forgotten = trim_stream(stream)
  out[2], out[3], out[4] = out[2] + trimmed, math.max(out[3], more), out[4] + forgotten
end
turn_generations()
-- Job events older than the topic's events_age go; a stream left from events turned off goes
-- whole once past it too.
local age = redis.pcall('HGET', KEYS[6], 'events_age')
if type(age) ~= 'string' then
  age = ARGV[1]
end
redis.pcall('XTRIM', KEYS[7], 'MINID', '~', wq_fmt(now - tonumber(age)))
-- So do the oldest past the most the topic keeps (field 'events'). Each entry's c counts the
-- events written up to it, so an entry whose c is at most the last's less that cap holds only
-- events past it. The first entries are read (at most `limit`) until one to keep; the rest go
-- in later calls (meanwhile the XADDs' MAXLEN caps the entries).
local cap = tonumber((redis.pcall('HGET', KEYS[6], 'events')))
local last = cap and redis.pcall('XREVRANGE', KEYS[7], '+', '-', 'COUNT', 1)
local upto = type(last) == 'table' and last[1] and tonumber(wq_fields(last[1][2])['c'])
if upto then
  local start, seen, drop, keep = '-', 0, nil, nil
  while not keep and seen < limit do
    local page = redis.call('XRANGE', KEYS[7], start, '+', 'COUNT', seen == 0 and 1 or 100)
    if #page == 0 then
      break
    end
    for _, entry in ipairs(page) do
      local c = tonumber(wq_fields(entry[2])['c'])
      if not c or c > upto - cap or seen >= limit then
        keep = entry[1]
        break
      end
      drop, seen, start = entry[1], seen + 1, '(' .. entry[1]
    end
  end
  if keep and drop then
    redis.call('XTRIM', KEYS[7], 'MINID', keep)
  elseif drop then -- every entry looked at goes: up to the id just after the last
    local id = wq_id(drop)
    redis.call('XTRIM', KEYS[7], 'MINID', wq_fmt(id[1]) .. '-' .. wq_fmt(id[2] + 1))
  end
end
return out
