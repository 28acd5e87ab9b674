--[[ touch.lua — refresh (or give up) this worker's claims on entries it holds.
For each id still pending for this consumer, XCLAIM it to itself with the given idle time:
0 keeps a running handler's entry from being taken over; the visibility timeout hands an
entry this worker will not run to the next worker that scans for idle entries. Entries some
other worker has taken over meanwhile are left alone. JUSTID: delivery counts do not change.
KEYS[1]  {T:s}:stream    STREAM  the stream the group reads: {T:s}:ready, or {T:s}:callbacks (the deliverer)
ARGV[1]  consumer group
ARGV[2]  consumer
ARGV[3]  idle time to set, ms
ARGV[4..] entry ids
Returns: {0, lost_1, lost_2, ...}   ids no longer pending for this consumer
         a WRONGTYPE error reply when the stream key holds another type (nothing written)
Includes: status
]]
local mine, out = {}, {WQ_OK}
for i = 4, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1, ARGV[2])
  if p[1] then
    mine[#mine + 1] = ARGV[i]
  else
    out[#out + 1] = ARGV[i]
  end
end
if #mine > 0 then
  local args = {'XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0}
  for _, id in ipairs(mine) do
    args[#args + 1] = id
  end
  for _, v in ipairs({'IDLE', ARGV[3], 'JUSTID'}) do
    args[#args + 1] = v
  end
  redis.call(unpack(args))
end
return out
