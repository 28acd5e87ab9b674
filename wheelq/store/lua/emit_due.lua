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
local bad = wq_bad_type(KEYS[1], 'zset', KEYS[2], 'hash', KEYS[3], 'stream')
if bad then
  return {-1, bad}
end
local now = math.min(tonumber(ARGV[3]), wq_now_ms())
local ids = {}
if #ARGV > 4 then
  for i = 5, #ARGV do
    ids[#ids + 1] = ARGV[i]
  end
else
  ids = redis.call('ZRANGE', KEYS[1], '-inf', wq_fmt(now), 'BYSCORE', 'LIMIT', 0, tonumber(ARGV[4]))
end
local out = {0, 0, 0, 0}
for _, id in ipairs(ids) do
  local score = redis.call('ZSCORE', KEYS[1], id)
  if score then
    local due = tonumber(score)
    if due <= now then
      local envelope = redis.call('HGET', KEYS[2], id)
      if envelope then
        wq_fire(KEYS[3], ARGV[2], id, due, envelope)
        out[2] = out[2] + 1
      else
        out[4] = out[4] + 1
      end
      redis.call('ZREM', KEYS[1], id)
      redis.call('HDEL', KEYS[2], id)
    else
      out[#out + 1] = id
      out[#out + 1] = score
    end
  end
end
if #ARGV <= 4 and redis.call('ZCOUNT', KEYS[1], '-inf', wq_fmt(now)) > 0 then
  out[3] = 1
end
return out
