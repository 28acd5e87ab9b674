--[[ ack.lua — runs that succeeded: ack their entries and note each success in the job's history
(or, ARGV[9] 'expired', entries dropped at their expiry unrun: each noted 'X' and counted).
Only the first settlement of an entry counts: an entry no longer pending in the group (someone
else settled it, or this call's earlier send whose reply was lost) is skipped, and its record
(with its result) is left as it is.
KEYS[1]  {T:s}:stream    STREAM  the stream the group reads: {T:s}:ready, or {T:s}:callbacks (the deliverer)
KEYS[2]  {T:s}:history   HASH    the group's record of each job becomes 'S'
KEYS[3]  {T:s}:history_old HASH  the previous generation (read when some were settled already)
KEYS[4]  {T:s}:waiters   ZSET    results awaited: "id<US>group" -> ms the wait ends (wq_waited)
KEYS[5]  {T:s}:done      STREAM  one entry naming the awaited records written (wq_wake)
KEYS[6]  {T:s}:limits    HASH    "events", "events_age": the topic's events setting (wheelq.core.events);
         "expired": entries dropped at their expiry (ARGV[9])
KEYS[7]  {T:s}:events    STREAM  job events while the topic has them on (wq_event)
KEYS[8]  {T:s}:followers HASH    jobs waiting on these (includes/follow.lua): each record written
         tells them ('S'; 'X' expired)
KEYS[9]  {T:s}:notices   STREAM  the notices
KEYS[10] {T:s}:inbox     LIST    the leader's inbox: nudged when a notice was added
ARGV[1]  consumer group
ARGV[2]  msgpack array of the entry ids
ARGV[3]  msgpack array, two per entry in the same order: the history field (job id<US>group)
         and its 'S' record (wq_record's layout, with the handler's result as an eighth
         element when it returned one, a msgpack str as every element, since cmsgpack reads
         no bin: made by wheelq.core.history.pack_success)
ARGV[4]  bytes of the results in ARGV[3] ('0': none); added to the generation's <US>results
         (WQ_RESULTS), the count trim.lua adds to the history's size
ARGV[5]  msgpack array, one per entry in the same order: the attempt that succeeded (0: not
         known), for its 'succeeded' event while the topic has events on
ARGV[6]  handlers of this shard that started since the settler's last round, noted first as
         'started' events while the topic has events on (so a job's start always precedes
         its end in the stream): msgpack array job id, attempt, job id, attempt, ...; '' none
ARGV[7]  optional, pull receipts: msgpack array, two per entry in the same order: the consumer
         and the delivery count each receipt was issued for; an entry is acked only while
         pending to that delivery (wq_delivered); '' none
ARGV[8]  optional, results kept apart (a task's result_ttl; '' none): msgpack array, the TTL in ms, then
         two per result: the index of its entry in ARGV[2] (1-based) and the result; the n-th
         is SET (a STRING) with that TTL in the n-th key after the ten above, its
         {T:s}:result:<id><US><group> (wheelq.core.keys.result_key), when its entry's record is
         written (its 'S' record then holds the TTL, not the result)
ARGV[9]  optional: 'expired' when the records are 'X' (entries read past their expiry, never
         run: wheelq.core.expiry): their events are 'expired', and the shard's limits count
         them ('expired', as wq_expire does)
Returns: {0, acked}
         {0, acked, outcomes} with ARGV[7]: per entry 1 acked, 0 not pending (settled before),
           -1 pending to a later delivery (a stale receipt: nothing written for it)
         {-1, key}   WRONG_TYPE (nothing written)
Includes: base, delivery, events, follow, history, status, waiters
]]
wq_events_on(KEYS[6], KEYS[7])
local wrong = wq_wrong_type(KEYS[1], 'stream', KEYS[2], 'hash')
if wrong then return wrong end
local group = ARGV[1]
if WQ_EVENTS and ARGV[6] ~= '' then
  wq_events('started', group, cmsgpack.unpack(ARGV[6]))
end
local entries = cmsgpack.unpack(ARGV[2])
if #entries == 0 then
  return {WQ_OK, 0}
end
local pairs = cmsgpack.unpack(ARGV[3])
local kind = ARGV[9] or 'succeeded'

-- Write the records `rec` (field/record pairs, field "id<US>group") of the entries of
-- indexes `kept` (nil: every entry's, in order), their 'succeeded' events, and wake the
-- waiters of their results when the call acked any.
local function record(rec, kept, acked)
  wq_remember(KEYS[2], rec)
  if ARGV[8] and ARGV[8] ~= '' then
    local apart, written = cmsgpack.unpack(ARGV[8]), {}
    for _, i in ipairs(kept or {}) do
      written[i] = true
    end
    for j = 2, #apart, 2 do
      if not kept or written[apart[j]] then
        redis.call('SET', KEYS[10 + j / 2], apart[j + 1], 'PX', apart[1])
      end
    end
  end
  if WQ_EVENTS and #rec > 0 then
    local attempts, jobs, cut = cmsgpack.unpack(ARGV[5]), {}, #group + 1
    for i = 1, #rec, 2 do
      local n = (i + 1) / 2
      jobs[i] = string.sub(rec[i], 1, #rec[i] - cut)
      jobs[i + 1] = attempts[kept and kept[n] or n] or 0
    end
    wq_events(kind, group, jobs)
  end
  if kind == 'expired' and #rec > 0 then
    redis.pcall('HINCRBY', KEYS[6], 'expired', #rec / 2)
  end
  if acked > 0 and wq_waited(KEYS[4]) then
    wq_wake(KEYS[4], KEYS[5], rec, 2)
  end
  if #rec > 0 and wq_followed(KEYS[8])
      and wq_tell_fields(KEYS[8], KEYS[9], rec, 2, kind == 'expired' and 'X' or 'S') > 0 then
    wq_nudge(KEYS[10], KEYS[8])
  end
end
if ARGV[4] ~= '0' then -- counted whether or not each was written: never less than the truth
  redis.call('HINCRBY', KEYS[2], WQ_RESULTS, ARGV[4])
end
if ARGV[7] and ARGV[7] ~= '' then
  -- Each receipt settles its own delivery or nothing: its record goes with its XACK, so a
  -- receipt not pending now was settled (and recorded) before.
  local fences = cmsgpack.unpack(ARGV[7])
  local outcomes, rec, acked, kept = {}, {}, 0, {}
  for i = 1, #entries do
    local got = wq_delivered(KEYS[1], group, entries[i], fences[2 * i - 1], fences[2 * i])
    if got == 1 then
      redis.call('XACK', KEYS[1], group, entries[i])
      rec[2 * acked + 1], rec[2 * acked + 2] = pairs[2 * i - 1], pairs[2 * i]
      acked = acked + 1
      kept[acked] = i
    end
    outcomes[i] = got
  end
  record(rec, kept, acked)
  return {WQ_OK, acked, outcomes}
end
-- One XACK for all (at most 1000: wheelq.worker.settler.ACKS_PER_CALL): when it acks every
-- entry (the usual case) each gets its record. When it acks fewer, some were settled already,
-- and the first settlement stands: by another worker that took them over (its record names
-- the entry: 'S' with its result, 'R' or 'D'; or a later firing of the job), or by this one,
-- its reply lost (its record is there already). Those records are left alone. A record
-- naming the entry as only fired ('F', a retry's firing) means nobody settled it before:
-- this XACK did. An entry not in the stream was never pending here (or was settled and
-- trimmed): no record for it.
local acked = redis.call('XACK', KEYS[1], group, unpack(entries))
local kept = nil -- every entry's
if acked < #entries then
  local rec, n = {}, 0
  kept = {}
  for i = 1, #entries do
    local field = pairs[2 * i - 1]
    local known = wq_read_record(wq_hget(KEYS[2], KEYS[3], field))
    local keep = known ~= nil and (wq_id_lt(entries[i], known[2]) or
      (known[2] == entries[i] and known[1] ~= 'F'))
    if not keep and not redis.call('XRANGE', KEYS[1], entries[i], entries[i])[1] then
      keep = true
    end
    if not keep then
      rec[n + 1], rec[n + 2] = field, pairs[2 * i]
      n = n + 2
      kept[#kept + 1] = i
    end
  end
  pairs = rec
end
record(pairs, kept, acked)
return {WQ_OK, acked}
