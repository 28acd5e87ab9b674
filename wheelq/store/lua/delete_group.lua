--[[ delete_group.lua — delete a consumer group of one shard's stream, unless it has entries in flight.
"In flight": delivered to a consumer of the group and not acked (its pending entries list).
Entries it has not read yet do not count: they stay in the stream for the other groups. The
count and the XGROUP DESTROY are one step, so an entry delivered after a check is never
dropped with the group unless the caller forced it.
KEYS[1]  {T:s}:stream    STREAM  the stream the group reads: {T:s}:ready, or {T:s}:callbacks
ARGV[1]  consumer group
ARGV[2]  mode: 'check' (count, delete nothing) | 'delete' (delete when nothing is in flight)
         | 'force' (delete whatever is in flight)
Returns: {0, outcome, in_flight}   outcome: NO_GROUP (0, no stream or no such group), GROUP_FOUND
           (1, 'check'), GROUP_BUSY (2, 'delete' with entries in flight: kept), GROUP_DESTROYED
           (3); in_flight: the group's entries in flight when the script ran (0 with NO_GROUP)
         {-1, key}   WRONG_TYPE (nothing deleted)
Includes: base, status
]]
local wrong = wq_wrong_type(KEYS[1], 'stream')
if wrong then return wrong end
local in_flight
if redis.call('EXISTS', KEYS[1]) == 1 then
  for _, flat in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
    local g = wq_fields(flat)
    if g['name'] == ARGV[1] then
      in_flight = tonumber(g['pending'])
    end
  end
end
if not in_flight then
  return {WQ_OK, WQ_NO_GROUP, 0}
end
local mode = ARGV[2]
if mode == 'check' then
  return {WQ_OK, WQ_GROUP_FOUND, in_flight}
end
if mode ~= 'force' and in_flight > 0 then
  return {WQ_OK, WQ_GROUP_BUSY, in_flight}
end
redis.call('XGROUP', 'DESTROY', KEYS[1], ARGV[1])
return {WQ_OK, WQ_GROUP_DESTROYED, in_flight}
