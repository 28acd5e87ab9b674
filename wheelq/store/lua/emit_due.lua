--[[ emit_due.lua — fenced, atomic move of due jobs from the sorted set into the ready stream.
Only the lease holder may emit; a job is emitted only while it is still in the sorted set with a
due time <= now, and is removed in the same call, so no job is ever emitted twice.
KEYS[1]  {T:s}:delayed   ZSET
KEYS[2]  {T:s}:jobs      HASH
KEYS[3]  {T:s}:ready     STREAM
KEYS[4]  {T:s}:lease     STRING  token of the leader
ARGV[1]  the caller's lease token
ARGV[2]  topic
ARGV[3]  now, ms on the caller's clock; the script uses min(ARGV[3], TIME) so it never fires early
ARGV[4]  limit: most jobs to emit in sweep mode
ARGV[5..] job ids to emit (wheel mode); none given = sweep mode: the oldest jobs due by now
Returns: {0, emitted, more, orphans, id_1, due_1, id_2, due_2, ...}
           more    1 when jobs due by now remain after this call (sweep mode), else 0
           orphans ids found in the sorted set without an envelope (removed; cannot be emitted)
           pairs   ids still pending but not yet due (rescheduled later), with their due ms
         {-2} the caller does not hold the lease (nothing written)
         {-1, key} wrong type (nothing written)
]]
if redis.call('GET', KEYS[4]) ~= ARGV[1] then
  return {-2}
end
-- No TYPE calls: a wrong-typed sorted set or hash fails its first read, a wrong-typed stream
-- its first XADD, each before anything is written (pcall turns the failure into a status).
local now = math.min(tonumber(ARGV[3]), wq_now_ms())
local ids = {}
if #ARGV > 4 then
  for i = 5, #ARGV do
    ids[#ids + 1] = ARGV[i]
  end
else
  ids = redis.pcall('ZRANGE', KEYS[1], '-inf', wq_fmt(now), 'BYSCORE', 'LIMIT', 0,
    tonumber(ARGV[4]))
  if ids.err then
    return {-1, KEYS[1]}
  end
end
local out = {0, 0, 0, 0}
if #ids == 0 then
  return out
end
-- Batched: one ZMSCORE and one HMGET read every id, one ZREM and one HDEL remove the emitted.
local scores = wq_multi('ZMSCORE', KEYS[1], ids, redis.pcall)
if scores.err then
  return {-1, KEYS[1]}
end
local envelopes = wq_multi('HMGET', KEYS[2], ids, redis.pcall)
if envelopes.err then
  return {-1, KEYS[2]}
end
local gone, seen, failed = {}, {}, nil
for i, id in ipairs(ids) do
  if scores[i] and not seen[id] then
    seen[id] = true
    if tonumber(scores[i]) <= now then
      if envelopes[i] then
        local added = wq_fire(KEYS[3], ARGV[2], id, scores[i], envelopes[i])
        if type(added) == 'table' and added.err then
          failed = added.err
          break
        end
        out[2] = out[2] + 1
      else
        out[4] = out[4] + 1
      end
      gone[#gone + 1] = id
    else
      out[#out + 1] = id
      out[#out + 1] = scores[i]
    end
  end
end
-- Jobs appended so far leave the sorted set even if a later XADD failed: never twice.
if #gone > 0 then
  wq_multi('ZREM', KEYS[1], gone)
  wq_multi('HDEL', KEYS[2], gone)
end
if failed then
  if out[2] == 0 and string.find(failed, 'WRONGTYPE', 1, true) then
    return {-1, KEYS[3]}
  end
  return redis.error_reply(failed)
end
if #ARGV <= 4 and redis.call('ZCOUNT', KEYS[1], '-inf', wq_fmt(now)) > 0 then
  out[3] = 1
end
return out
