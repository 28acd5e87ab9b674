--[[ emit_due.lua — fenced, atomic move of due jobs from the sorted set into the ready stream
(the callbacks stream for a job with a callback), or dropped as expired past its expiry
(wq_expire: not fired, noted in the history and counted); only the lease holder emits, and a job is
removed in the same call, so none is emitted twice (docs/architecture.md, invariant 2). An
undecodable envelope is dead-lettered ('malformed'). One call moves envelopes up to ARGV[5]
bytes plus the first that does not fit; the others are held for the next call.
KEYS[1]  {T:s}:delayed   ZSET    job id -> due ms
KEYS[2]  {T:s}:jobs      HASH    job id -> envelope
KEYS[3]  {T:s}:ready     STREAM  fired jobs
KEYS[4]  {T:s}:lease     STRING  token of the leader
KEYS[5]  {T:s}:dead      STREAM  dead letters (malformed envelopes)
KEYS[6]  {T:s}:history   HASH    job id -> its latest entry (wq_fired)
KEYS[7]  {T:s}:history_old HASH  the history's previous generation (read by wq_fired)
KEYS[8]  {T:s}:limits    HASH    "expired": jobs dropped at their expiry (wq_expire); "ready": most fired jobs the slowest consumer group may have
         to catch up on (unacked + not yet read; with no group, the stream's length): past
         it, due jobs stay in the sorted set (wheelq.core.flow)
KEYS[9]  {T:s}:callbacks STREAM  fired jobs that carry a callback (wq_fire; counted in the
         "ready" limit as KEYS[3] is)
KEYS[10] {T:s}:retries   ZSET    pending retries' members (retry.lua): a fired retry leaves it
KEYS[11] {T:s}:events    STREAM  job events while the topic has them on (wq_event)
KEYS[12] {T:s}:held      HASH    the due line's jobs (includes/held.lua); with KEYS[13] and
KEYS[13] {T:s}:turns     ZSET    the lanes' keys named after it, on a shard that orders its due
KEYS[14] {T:s}:weights   HASH    jobs: every due job of the call is held, then the best that
         fit the line's room (wq_line_room) are fired, so the order is decided at the due ms
         (a sweep whose page left due jobs in the sorted set fires none: more = 1)
KEYS[15] {T:s}:keyed     HASH    the key index (includes/keyed.lua): a job with a key that fires
         or is dropped leaves its key's count
KEYS[16] {T:s}:far       HASH    the far tier's meta: the key index asks it whether an id it
         passes over is still pending (a far job never fires from here)
KEYS[17] {T:s}:followers HASH    jobs waiting on these (includes/follow.lua): a job dropped at
         its expiry tells them 'X', one dead-lettered as malformed 'D'
KEYS[18] {T:s}:notices   STREAM  the notices
KEYS[19] {T:s}:inbox     LIST    the leader's inbox: nudged when a notice was added
ARGV[1]  the caller's lease token
ARGV[2]  topic
ARGV[3]  now, ms on the caller's clock; the script uses min(ARGV[3], TIME) so it never fires early
ARGV[4]  limit: most jobs to emit in sweep mode
ARGV[5]  byte budget, bytes: envelope bytes one call moves (see above)
ARGV[6..] job ids to emit (wheel mode); none given = sweep mode: the oldest jobs due by now
Returns: {0, emitted, more, orphans, not_yet_due, malformed, held, throttled, waiting}
           more        1 when jobs due by now remain after this call (sweep mode), else 0
           orphans     ids found in the sorted set without an envelope (removed; cannot be emitted)
           not_yet_due {id_1, due_1, ...}: ids still pending but not yet due (rescheduled later)
           malformed   {id, ...}: moved to the dead-letter stream
           held        {id, ...}: due, but held back by the byte budget (still pending)
           throttled   1 when due jobs stay pending because the stream is at its "ready"
                       limit, or wait on the due line (not listed: the caller sweeps them
                       once workers catch up)
           waiting     jobs waiting on the due line after this call (0: the shard holds none)
         {-2}        LEASE_LOST: the caller does not hold the lease (nothing written)
         {-1, key}   WRONG_TYPE (nothing written)
Includes: base, dead_letters, envelope, events, fire, flow, follow, held, history, keyed, pending, status
]]
wq_events_on(KEYS[8], KEYS[11])
if redis.call('GET', KEYS[4]) ~= ARGV[1] then
  return {WQ_LEASE_LOST}
end
-- No TYPE calls: a wrong-typed sorted set or hash fails its first read, a wrong-typed stream
-- its first XADD, each before anything is written (pcall turns the failure into a status).
local now = math.min(tonumber(ARGV[3]), wq_now_ms())
-- Room in the stream under the "ready" limit (nil: no limit).
local f = redis.call('HMGET', KEYS[8], 'ready', unpack(WQ_LINE_FIELDS))
local room = wq_room(f[1], {KEYS[3], KEYS[9]})
local line = wq_line(KEYS[8], KEYS[12], KEYS[13], KEYS[14], {unpack(f, 2)})
local ids = {}
if #ARGV > 5 then
  for i = 6, #ARGV do
    ids[#ids + 1] = ARGV[i]
  end
else
  local limit = tonumber(ARGV[4])
  if room and not line then
    limit = math.max(0, math.min(limit, room))
  end
  ids = redis.pcall('ZRANGE', KEYS[1], '-inf', wq_fmt(now), 'BYSCORE', 'LIMIT', 0, limit)
  if ids.err then
    return {WQ_WRONG_TYPE, KEYS[1]}
  end
end
local later, malformed, held = {}, {}, {}
local out = {WQ_OK, 0, 0, 0, later, malformed, held, 0, 0}
if room and room <= 0 and #ARGV <= 5 and not line then
  if redis.call('ZCOUNT', KEYS[1], '-inf', wq_fmt(now)) > 0 then
    out[8] = 1
  end
  return out
end
-- Batched: one ZMSCORE reads every id, one ZREM and one HDEL remove the emitted.
local scores = #ids > 0 and wq_multi('ZMSCORE', KEYS[1], ids, redis.pcall) or {}
if scores.err then
  return {WQ_WRONG_TYPE, KEYS[1]}
end
local gone, aliases = {}, {} -- aliases: gone members that are retries (out of KEYS[10] too)
local taken = nil -- on a due line: what wq_take gave, by member
if line then
  -- Every due job of the call goes on the line (one still pending later is left as it is),
  -- then the best the line's room takes are fired below, in their order.
  local due, due_at = {}, {}
  for i, id in ipairs(ids) do
    if scores[i] and not due_at[id] then
      if tonumber(scores[i]) > now then
        later[#later + 1] = id
        later[#later + 1] = scores[i]
      else
        due[#due + 1] = id
        due_at[id] = scores[i]
      end
    end
  end
  if #due > 0 then
    local envelopes = wq_multi('HMGET', KEYS[2], due)
    local members, dues, envs = {}, {}, {}
    for i, id in ipairs(due) do
      if envelopes[i] then
        members[#members + 1], dues[#dues + 1] = id, due_at[id]
        envs[#envs + 1] = wq_envelope(envelopes[i]) or false
      else
        out[4] = out[4] + 1
        gone[#gone + 1] = id
        if string.find(id, '\31', 1, true) then
          aliases[#aliases + 1] = id
        end
      end
    end
    wq_hold(line, members, dues, envs)
    wq_multi('ZREM', KEYS[1], due)
  end
  local n = wq_line_room(line, room, {KEYS[3], KEYS[9]})
  if #ARGV <= 5 and #ids >= tonumber(ARGV[4]) and
      redis.call('ZCOUNT', KEYS[1], '-inf', wq_fmt(now)) > 0 then
    -- A sweep's page did not hold every due job (a new leader's catch-up): the rest, still in
    -- the sorted set, may rank ahead of what is held, so nothing fires until the pages that
    -- follow at once (more = 1) have held them all.
    n = 0
  end
  local got = n > 0 and wq_take(line, n) or {}
  ids, scores, taken, room = {}, {}, {}, nil
  for i, t in ipairs(got) do
    ids[i], scores[i], taken[t[1]] = t[1], t[2], t
  end
end
if #ids == 0 and not line then
  return out
end
-- Envelopes are read as the loop reaches them: in HMGET chunks sized from the bytes left in the
-- budget and the sizes read so far, until a chunk overdraws the budget; from then on each id's
-- size is asked first (HSTRLEN) and only envelopes that will move are read. Ids held back by
-- the budget are not read, so a call never copies a backlog of large envelopes.
local budget, extra = tonumber(ARGV[5]), true
local seen, failed, failed_key, rec, n_rec, fired = {}, nil, nil, {}, 0, {}
local envelopes, read_upto, chunk, probe = {}, 0, 4, false
local HELD = {} -- an envelope left unread: it does not fit the budget
local index = nil -- the key index's changes (wq_keyed), made by the first job with a key
local EXPIRED = {} -- a job dropped at its expiry (wq_expired), not fired
-- History fields ("id<US>group", "id<US>" every group) of the jobs dropped at their expiry and
-- of those dead-lettered undecodable: their followers are told (includes/follow.lua)
local expired, buried = {}, {}
for i, id in ipairs(ids) do
  if scores[i] and not seen[id] then
    seen[id] = true
    if tonumber(scores[i]) > now then
      later[#later + 1] = id
      later[#later + 1] = scores[i]
    elseif room and room <= 0 then
      out[8] = 1 -- stays pending; swept once the stream has room
    elseif budget <= 0 and not extra then
      held[#held + 1] = id
    else
      if i > read_upto and probe then
        read_upto = i
        local size = redis.call('HSTRLEN', KEYS[2], id)
        if size > budget and not extra then
          envelopes[i] = HELD
        else
          envelopes[i] = redis.call('HGET', KEYS[2], id)
        end
      elseif i > read_upto then
        read_upto = math.min(i + chunk - 1, #ids)
        local got = redis.pcall('HMGET', KEYS[2], unpack(ids, i, read_upto))
        if got.err then
          failed, failed_key = got.err, KEYS[2]
          break
        end
        local bytes = 0
        for j = 1, #got do
          envelopes[i + j - 1] = got[j]
          if got[j] then
            bytes = bytes + #got[j]
          end
        end
        probe = bytes > budget
        chunk = math.min(64, math.floor((budget - bytes) * #got / math.max(bytes, 1)) + 1)
      end
      local envelope = envelopes[i]
      if envelope == HELD then
        held[#held + 1] = id
      elseif not envelope then
        out[4] = out[4] + 1
        gone[#gone + 1] = id
        if string.find(id, '\31', 1, true) then
          aliases[#aliases + 1] = id
        end
      elseif #envelope > budget and not extra then
        held[#held + 1] = id
      else
        if #envelope > budget then
          extra = false
        else
          budget = budget - #envelope
        end
        local env, why = wq_envelope(envelope)
        local added
        if env and env[12] and wq_expired(env) then
          added = EXPIRED -- dropped, never fired (wq_expire below)
        elseif env then
          added = wq_fire(KEYS[3], ARGV[2], id, scores[i], env, KEYS[9], fired)
        else
          added = wq_bury(KEYS[5], ARGV[2], id, scores[i], envelope, why)
        end
        if type(added) == 'table' and added.err then
          failed, failed_key = added.err, KEYS[5]
          if env then
            failed_key = (type(env[9]) == 'string' and env[9] ~= '') and KEYS[9] or KEYS[3]
          end
          break
        end
        if env and env[10] and env[10] ~= '' and added ~= nil then
          index = index or wq_keyed(KEYS[15])
          index.gone(env[10], id) -- fired or dropped: it leaves the key index
        end
        if added == EXPIRED then
          wq_expire(KEYS[6], KEYS[7], id, env)
          expired[#expired + 1] = ((type(env[7]) == 'string' and env[7] ~= '') and env[7] or id)
            .. WQ_US .. (type(env[6]) == 'string' and env[6] or '')
          if env[6] and env[6] ~= '' then
            aliases[#aliases + 1] = id -- an expired retry leaves the index too
          end
        elseif env then
          out[2] = out[2] + 1
          if room then
            room = room - 1
          end
          if (env[6] == nil or env[6] == '') and (env[7] == nil or env[7] == '') then
            n_rec = n_rec + 2 -- wq_fired's usual case, inline: this loop is the hot path
            rec[n_rec - 1], rec[n_rec] = id, added
          else
            wq_fired(rec, KEYS[6], KEYS[7], id, env, added)
            n_rec = #rec
            if env[6] and env[6] ~= '' then
              aliases[#aliases + 1] = id -- a retry (under its id or an alias member)
            end
          end
        else
          malformed[#malformed + 1] = id
          buried[#buried + 1] = id .. WQ_US
          aliases[#aliases + 1] = id -- it may have been a retry: undecodable, it says not
        end
        gone[#gone + 1] = id
      end
    end
  end
end
-- Jobs appended so far leave the sorted set even if a later XADD failed: never twice.
wq_forget(KEYS[1], KEYS[2], gone)
wq_remember(KEYS[6], rec)
wq_events('fired', nil, fired)
if #aliases > 0 then
  -- pcall: the index only serves cancel and reschedule; a wrong-typed one must not fail an
  -- emit that has appended already
  wq_multi('ZREM', KEYS[10], aliases, redis.pcall)
end
if index then
  -- pcall: as for the retries' index, a wrong-typed key index must not fail an emit that has
  -- appended already
  local ok, err = pcall(index.apply, wq_keyed_live(KEYS[2], KEYS[10], KEYS[16]))
  if not ok then -- not silent: the server's log says so
    redis.log(redis.LOG_WARNING, 'wheelq emit_due: the key index of ' .. KEYS[15]
      .. ' was not updated: ' .. tostring(err))
  end
end
if #expired + #buried > 0 and wq_followed(KEYS[17]) then
  -- pcall too: telling followers must not fail an emit that has appended already
  local ok, told = pcall(function()
    return wq_tell_fields(KEYS[17], KEYS[18], expired, 1, 'X')
      + wq_tell_fields(KEYS[17], KEYS[18], buried, 1, 'D')
  end)
  if ok and told > 0 then
    pcall(wq_nudge, KEYS[19], KEYS[17])
  elseif not ok then -- not silent: the server's log says so (their jobs stay awaiting)
    redis.log(redis.LOG_WARNING, 'wheelq emit_due: jobs following ended jobs of '
      .. KEYS[17] .. ' were not told: ' .. tostring(told))
  end
end
if line then
  -- What was taken and not fired (held back by the byte budget, or after a failed XADD) goes
  -- back on the line, at its place: nothing taken off it is lost.
  local fired_or_dropped, back = {}, {}
  for _, id in ipairs(gone) do
    fired_or_dropped[id] = true
  end
  for _, id in ipairs(ids) do
    if not fired_or_dropped[id] then
      back[#back + 1] = taken[id]
    end
  end
  wq_put_back(line, back)
end
if failed then
  if #gone == out[4] and string.find(failed, 'WRONGTYPE', 1, true) then
    return {WQ_WRONG_TYPE, failed_key}
  end
  return redis.error_reply(failed)
end
if line then
  out[7] = {}
  out[9] = redis.call('HLEN', KEYS[12])
  if out[9] > 0 then
    out[8] = 1 -- jobs wait on the line: swept again as workers read
  end
  if #ARGV <= 5 and redis.call('ZCOUNT', KEYS[1], '-inf', wq_fmt(now)) > 0 then
    out[3] = 1
  end
  return out
end
if #ARGV <= 5 and (#held > 0 or redis.call('ZCOUNT', KEYS[1], '-inf', wq_fmt(now)) > 0) then
  if room and room <= 0 then
    out[8] = 1 -- more is due, but the stream is full: swept again once workers catch up
  else
    out[3] = 1
  end
end
return out
