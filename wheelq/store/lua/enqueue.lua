--[[ enqueue.lua — add jobs to one shard: fire each now if due, else schedule it.
Batched: one HMGET, one HSET and one ZADD for the whole batch. A spool replay (ARGV[3] > 0,
no call token) skips each write whose token (or call-token prefix C of "C:n") is in the
record KEYS[6] and records the others, so a replay applies each write once
(docs/architecture.md, "The producer spool and breaker", invariant 17); one that arrives
past its deadline (ARGV[5]) is refused whole ("The outbox relay": the fence).
KEYS[1]  {T:s}:delayed   ZSET    job id -> due ms
KEYS[2]  {T:s}:jobs      HASH    job id -> envelope
KEYS[3]  {T:s}:ready     STREAM  fired jobs
KEYS[4]  {T:s}:horizon   STRING  ms the leader has preloaded up to (absent: no leader)
KEYS[5]  {T:s}:inbox     LIST    "due:id" notes for the leader
KEYS[6]  {T:s}:spooled   ZSET    token of a replayed spool write, or of a spooling client's
         direct call -> Redis ms it expires (applied + record ms; a plain enqueue does not
         touch it)
KEYS[7]  {T:s}:history   HASH    job id -> its latest entry (jobs fired now)
KEYS[8]  {T:s}:history_old HASH  the history's previous generation (read by wq_fired)
KEYS[9]  {T:s}:limits    HASH    "pending": most jobs the shard may hold pending (not checked
         by a replay: it was accepted before); "ready": a job due now fires only while the
         stream has room under it, else it is scheduled at its due time (wheelq.core.flow);
         "ordered", "fair": the shard orders its due jobs, and none fires at once
KEYS[10] {T:s}:callbacks STREAM  fired jobs that carry a callback (wq_fire)
KEYS[11] {T:s}:events    STREAM  job events while the topic has them on (wq_event)
KEYS[12] {T:s}:retries   ZSET    pending retries' members: a job replacing one leaves it
KEYS[13] {T:s}:far       HASH    the far tier's meta (wq_far_state): a job due beyond the
         horizon (KEYS[9]'s "far") goes there, and a pending id is looked for there too
KEYS[14] {T:s}:held      HASH    the due line's jobs (includes/held.lua): one there has its
         envelope in KEYS[2], so it is pending to this call; a job replacing it takes it off
         the line (wq_unhold)
KEYS[15] {T:s}:keyed     HASH    the key index (includes/keyed.lua): a job with a key that ends
         the call pending is noted under it; a pending job written over or fired leaves its
         key (its envelope as it was says which)
ARGV[1]  topic
ARGV[2]  wake channel: one SPUBLISH per call that notes any job, its notes a line each
ARGV[3]  record ms: '0' for a plain enqueue; > 0 for a spool replay or a spooling client's
         direct call: its tokens are kept in KEYS[6] this long (the key lives at least that
         long after the call, and each call removes up to twice as many expired tokens as it
         adds)
ARGV[4]  call token: '' (a plain enqueue or a replay), or a spooling client's direct call's
         token, recorded in KEYS[6] if the call is applied (with record ms > 0)
ARGV[5]  layout: '' (each job carries its mode and replace) or, when every job of the call
         shares them, that mode and replace ('d0', 'd1', 'a0', 'a1'; never in a replay), then
         what the client vouches for the ids: '' nothing, 'u' no id repeats in the call, 'n'
         none repeats and none is pending (ids it made itself: 80 random bits each), so they
         are not read first. In a replay (which has no layout): its deadline, the Redis ms
         after which the call is refused (LATE), or '' (none). Any of these may end in 'o': a
         job of the call has a priority other than 5 (the shard orders its due jobs from then
         on: limits 'ordered'; the call that sets it publishes the topic on WQ_PAUSED_CHANNEL,
         so workers read ahead less at once: docs/architecture.md, "The due line"), and then in
         'k': the jobs carry keys, each job's arguments end with its key ('' for none)
ARGV[6..] per job, in order: id, mode ('d': value ms after TIME | 'a': value is the due ms),
          value ms, replace ('1' | '0'), envelope (msgpack), and in a replay its token (six per
          job; five otherwise); with a layout, id, value ms, envelope (three per job: Redis
          parses two arguments fewer per job); then, with 'k', its key
Returns: {0, placed_1, ..., placed_n}   per job, in order: 0 SCHEDULED (a job due now too,
           when the stream is at its "ready" limit), 1 FIRED now (due <= TIME), 2 DUPLICATE: pending already and replace = '0' (not written),
           4 APPLIED: replay only, its token is in KEYS[6] (not written again),
           5 FULL: the call would take the shard past its "pending" limit (every job of the
           call is FULL, and nothing is written)
         {-1, key}   WRONG_TYPE (nothing written)
         {-3, topic, id, why}   MALFORMED: an envelope due now cannot be decoded (a caller's
           bug: wheelq writes none); jobs before it that fired are in the stream (and their
           tokens recorded, so a replay of the call fires none twice), nothing else is written
           (no other token recorded, so a replay writes the jobs it did not)
         {-4, topic, deadline ms, now ms}   LATE: a replay past its deadline (nothing written)
Includes: base, events, far_tier, fire, flow, held, keyed, pending, status
]]
wq_events_on(KEYS[9], KEYS[11])
-- Type checks: the sorted set, the stream and the inbox (and a replay's record, and the hash of
-- new ids, which is not read) by TYPE (a job must not be scheduled into a shard it could never
-- fire from); the horizon and the hash by their first read.
local record_ms, call_token, layout = tonumber(ARGV[3]), ARGV[4], ARGV[5]
-- A trailing 'k': each job's arguments end with its key (the key index, includes/keyed.lua).
local keyed = string.sub(layout, -1) == 'k'
if keyed then
  layout = string.sub(layout, 1, -2)
end
-- A trailing 'o': a job of the call has a priority other than the default, so from now on the
-- shard orders its due jobs on its due line (includes/held.lua): noted before anything of the
-- call can fire.
local orders = string.sub(layout, -1) == 'o'
if orders then
  layout = string.sub(layout, 1, -2)
end
local replay = record_ms > 0 and call_token == ''
-- stride: arguments per job; a job's value and envelope are ARGV[i + at_value], ARGV[i +
-- at_envelope], its mode and replace call_mode and call_replace (false: ARGV[i + 1], [i + 3])
local stride, at_value, at_envelope, call_mode, call_replace = 5, 2, 4, false, false
-- unique: no id repeats in the call; new: nor is any pending (the client's word, ARGV[5])
local unique, new = false, false
if replay then
  stride = 6
elseif layout ~= '' then
  stride, at_value, at_envelope = 3, 1, 2
  call_mode, call_replace = string.sub(layout, 1, 1), string.sub(layout, 2, 2)
  new = string.sub(layout, 3, 3) == 'n'
  unique = new or string.sub(layout, 3, 3) == 'u'
end
if keyed then
  stride = stride + 1
end
local typed, t = {KEYS[1], 'zset', KEYS[3], 'stream', KEYS[5], 'list'}, 6
if record_ms > 0 then
  typed[t + 1], typed[t + 2], t = KEYS[6], 'zset', t + 2
end
if new then
  typed[t + 1], typed[t + 2] = KEYS[2], 'hash'
end
local wrong = wq_wrong_type(unpack(typed))
if wrong then return wrong end
local horizon = redis.pcall('GET', KEYS[4])
if type(horizon) == 'table' and horizon.err then
  return {WQ_WRONG_TYPE, KEYS[4]}
end
horizon = tonumber(horizon)
local now = wq_now_ms()
-- A replay's writes land by its deadline or not at all: the tokens of rows settled since are
-- kept past any deadline a write sent before the settlement can carry (the relay's fence).
if replay and layout ~= '' and now > tonumber(layout) then
  return {WQ_LATE, ARGV[1], layout, now}
end
-- Tables are filled by counters, not by #t + 1: Lua 5.1 finds a table's length by a search.
local ids, tokens = {}, {}
for i = 6, #ARGV, stride do
  local n = (i - 6) / stride + 1
  ids[n] = ARGV[i]
  if replay then
    tokens[n] = ARGV[i + 5]
  end
end
if #ids == 0 then
  return {WQ_OK}
end
-- A replay: which writes an earlier call applied (their own token, or the direct call they
-- came from), and the tokens this call decides.
-- later: tokens of writes gathered to be made at the end, recorded with them (a call refused
-- before its end records only what it wrote)
local applied, decided, later = {}, {}, {}
if replay then
  local calls = {}
  for n, token in ipairs(tokens) do
    calls[n] = string.match(token, '^(.*):[^:]*$') or token
  end
  local own, origin = wq_multi('ZMSCORE', KEYS[6], tokens), wq_multi('ZMSCORE', KEYS[6], calls)
  for n = 1, #tokens do
    applied[n] = own[n] ~= false or origin[n] ~= false
  end
elseif call_token ~= '' and record_ms > 0 then
  decided[1], decided[2] = wq_fmt(now + record_ms), call_token
end
local function record()
  if #decided == 0 then
    return
  end
  wq_multi('ZADD', KEYS[6], decided)
  local expired = redis.call('ZRANGE', KEYS[6], '-inf', '(' .. wq_fmt(now), 'BYSCORE', 'LIMIT',
    0, #decided)
  wq_multi('ZREM', KEYS[6], expired)
  local ttl = redis.call('PTTL', KEYS[6])
  if ttl < record_ms then  -- -1 (none yet) too; a longer-lived token keeps the key longer
    redis.call('PEXPIRE', KEYS[6], record_ms)
  end
end
-- Jobs are applied in order, as if one by one; the writes are gathered and made at the end.
-- With unique ids each job's writes are gathered as it is met. Else a later job of an id
-- decides its writes: final: id -> its due (a number) if it ends scheduled, false if it
-- fired; envelope: its envelope then (two flat tables, not a table per job); order: the ids
-- as first met.
local pending, final, envelopes, order = {}, {}, {}, {}
-- zadd's scores are numbers: Redis writes a whole number's digits exactly (Lua's tostring
-- would not)
local hset, zadd, gone, m = {}, {}, {}, 0
local flags = new and {} or wq_multi('HMGET', KEYS[2], ids, redis.pcall)
if flags.err then
  return {WQ_WRONG_TYPE, KEYS[2]}
end
local limits = redis.pcall('HMGET', KEYS[9], 'pending', 'ready', 'far', 'ordered', 'fair')
if limits.err then
  return {WQ_WRONG_TYPE, KEYS[9]}
end
if orders and not limits[4] then
  redis.call('HSET', KEYS[9], 'ordered', '1')
  redis.call('PUBLISH', WQ_PAUSED_CHANNEL, ARGV[1])
end
-- On a shard that orders its due jobs, none fires at once: a job due now is scheduled at its
-- due time, and the leader puts it on the line (wq_fire_room).
local lined = orders or limits[4] or limits[5]
local far = wq_far_state(KEYS[13], limits[3])
-- far_found[id]: the id's pending job is in the far tier (wq_far_find's answer) until the
-- call drops it (a job written over it, fired over it)
local far_found = {}
-- was[id]: the envelope pending under the id before the call (the key index reads its key when
-- the call writes over it or fires it), false: none
local was = {}
for n, flag in ipairs(flags) do
  local id = ids[n]
  pending[id] = flag ~= false
  if not pending[id] and far.entries > 0 and far_found[id] == nil then
    far_found[id] = far:find(id) or false
    pending[id] = far_found[id] ~= false
  end
  if was[id] == nil then
    was[id] = flag or (far_found[id] and far_found[id].envelope) or false
  end
end
-- A pending job written over or fired: out of the far tier if it was there.
local function leave_far(id)
  if far_found[id] then
    far:drop(far_found[id])
    far_found[id] = false
  end
end
local cap = not replay and limits[1]
-- Room under the "ready" limit (nil: none), asked only when a job of the call is due now: one
-- that finds no room is scheduled at its due time instead of fired, and the leader emits it
-- as workers catch up (a replay too: holding a job back refuses nothing).
local room
if lined then
  room = 0
elseif limits[2] then
  for n = 1, #ids do
    local i = 6 + (n - 1) * stride
    -- due now: a delay of 0 (mode 'd'), or a due time at or before now (mode 'a')
    local latest = (call_mode or ARGV[i + 1]) == 'd' and 0 or now
    if tonumber(ARGV[i + at_value]) <= latest then
      room = wq_room(limits[2], {KEYS[3], KEYS[10]})
      break
    end
  end
end
if cap then
  -- Jobs this call would add to the sorted set: new ids due later, and new ids due now that
  -- find no room in the stream.
  local adds, left = 0, room
  for n = 1, #ids do
    local i = 6 + (n - 1) * stride
    local due = tonumber(ARGV[i + at_value])
    if (call_mode or ARGV[i + 1]) == 'd' then
      due = now + due
    end
    if not pending[ids[n]] then
      if due > now or (left and left <= 0) then
        adds = adds + 1
      elseif left then
        left = left - 1
      end
    end
  end
  if adds > 0 and redis.call('ZCARD', KEYS[1]) + far.entries + adds > tonumber(cap) then
    local full = {WQ_OK}
    for n = 1, #ids do
      full[n + 1] = WQ_FULL
    end
    return full
  end
end
local out, notes, ordered, replaced = {WQ_OK}, {}, 0, {}
-- ends[id]: what the call leaves under the id, for the key index: the key of the job it leaves
-- pending ('' for none), or false when it fired; nil: untouched (kept only when a job has a
-- key or the call may write over a pending one)
local ends, track = {}, keyed or not new
-- Jobs due beyond the far horizon (id, due, envelope: three entries a job), put there together
-- at the end; was[id]: it replaces a pending job (in the sorted set, or dropped from the tier)
local farward, f, replacing = {}, 0, {}
for n = 1, #ids do
  local i = 6 + (n - 1) * stride
  local id, value, envelope = ARGV[i], tonumber(ARGV[i + at_value]), ARGV[i + at_envelope]
  local due = value
  if (call_mode or ARGV[i + 1]) == 'd' then
    due = now + value
  end
  if applied[n] then
    out[n + 1] = WQ_APPLIED
  else
    if not unique and final[id] == nil then
      ordered = ordered + 1
      order[ordered] = id
    end
    if pending[id] and (call_replace or ARGV[i + 3]) ~= '1' then
      out[n + 1] = WQ_DUPLICATE
    elseif due <= now and not (room and room <= 0) then
      if pending[id] then
        replaced[#replaced + 1] = id -- a retry it replaces is a retry no more
        leave_far(id)
      end
      if room then
        room = room - 1
      end
      local refused = wq_fire_now(KEYS[3], KEYS[7], KEYS[8], ARGV[1], id, due, envelope,
        KEYS[10])
      if refused then
        record()
        return refused
      end
      if not unique then
        pending[id], final[id] = false, false
      elseif pending[id] then
        gone[#gone + 1] = id
      end
      out[n + 1] = WQ_FIRED
      if track then
        ends[id] = false
      end
      if replay then
        decided[#decided + 1], decided[#decided + 2] = wq_fmt(now + record_ms), tokens[n]
      end
    else
      if pending[id] then
        replaced[#replaced + 1] = id
        leave_far(id)
      end
      if unique then
        if wq_far_takes(far, due, now) then
          f = f + 3
          farward[f - 2], farward[f - 1], farward[f], replacing[id] = id, due, envelope, pending[id]
        else
          hset[m + 1], hset[m + 2], zadd[m + 1], zadd[m + 2] = id, envelope, due, id
          m = m + 2
        end
      else
        pending[id], final[id], envelopes[id] = true, due, envelope
      end
      if horizon and due <= horizon then
        notes[#notes + 1] = wq_note(due, id)
      end
      if track then
        ends[id] = keyed and ARGV[i + stride - 1] or ''
      end
      out[n + 1] = WQ_SCHEDULED
    end
    if replay and out[n + 1] ~= WQ_FIRED then
      later[#later + 1], later[#later + 2] = wq_fmt(now + record_ms), tokens[n]
    end
  end
end
for _, id in ipairs(order) do  -- empty with unique ids
  local due = final[id]
  if due and wq_far_takes(far, due, now) then
    f = f + 3
    farward[f - 2], farward[f - 1], farward[f], replacing[id] = id, due, envelopes[id], true
  elseif due then
    hset[m + 1], hset[m + 2], zadd[m + 1], zadd[m + 2] = id, envelopes[id], due, id
    m = m + 2
  elseif due == false then
    gone[#gone + 1] = id
  end
end
if f > 0 then
  -- The jobs no leaf takes are scheduled in the sorted set; one a leaf takes that replaces a
  -- job there takes it out.
  local left, kept = far:put(farward, now), {}
  for i = 1, #left, 3 do
    hset[m + 1], hset[m + 2], zadd[m + 1], zadd[m + 2] = left[i], left[i + 2], left[i + 1], left[i]
    m = m + 2
    kept[left[i]] = true
  end
  for i = 1, f, 3 do
    if replacing[farward[i]] and not kept[farward[i]] then
      gone[#gone + 1] = farward[i]
    end
  end
end
wq_forget(KEYS[1], KEYS[2], gone)
if #replaced > 0 then
  wq_multi('ZREM', KEYS[12], replaced)
  for _, id in ipairs(replaced) do -- due and waiting on the line: replaced there too
    wq_unhold(KEYS[14], id)
  end
end
if m > 0 then
  wq_multi('HSET', KEYS[2], hset)
  wq_multi('ZADD', KEYS[1], zadd)
end
if #notes > 0 then
  wq_multi('RPUSH', KEYS[5], notes)
  -- One wake message for the call, its notes a line each: a batch written to a shard that
  -- sleeps with its horizon far ahead is one message to the leader, not one per job.
  redis.call('SPUBLISH', ARGV[2], table.concat(notes, '\n'))
end
if track then
  -- The key index: each id the call left pending under a key it was not pending under is
  -- noted; each pending job it wrote over with another key (or none) or fired leaves its key.
  local index = nil
  for id, key in pairs(ends) do
    local before = wq_key_of(was[id])
    local after = key ~= '' and key or nil
    if before ~= after then
      index = index or wq_keyed(KEYS[15])
      if before then
        index.gone(before, id)
      end
      if after then
        index.note(after, id)
      end
    end
  end
  if index then
    index.apply(wq_keyed_live(KEYS[2], KEYS[12], far))
  end
end
for i = 1, #later do
  decided[#decided + 1] = later[i]
end
record()
return out
