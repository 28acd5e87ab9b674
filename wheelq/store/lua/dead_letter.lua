--[[ dead_letter.lua — ack entries and copy them, with why, into the dead-letter stream.
An entry no longer pending in the group (someone else settled it) is skipped.
KEYS[1]  {T:s}:stream    STREAM  the stream the group reads: {T:s}:ready, or {T:s}:callbacks (the deliverer)
KEYS[2]  {T:s}:dead      STREAM  dead letters
KEYS[3]  {T:s}:history   HASH    the group's record of each job becomes 'D' (wq_dead)
ARGV[1]  consumer group
ARGV[2..] three per entry: entry id, reason (failed | deliveries | malformed), error text
Returns: {0, dead_lettered}
         {-1, key}   WRONG_TYPE (nothing written)
]]
local bad = wq_bad_type(KEYS[1], 'stream', KEYS[2], 'stream', KEYS[3], 'hash')
if bad then
  return {WQ_WRONG_TYPE, bad}
end
local n = 0
for i = 2, #ARGV, 3 do
  if redis.call('XACK', KEYS[1], ARGV[1], ARGV[i]) == 1 then
    wq_dead(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[i], ARGV[i + 1], ARGV[i + 2])
    n = n + 1
  end
end
return {WQ_OK, n}
