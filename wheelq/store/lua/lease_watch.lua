--[[ lease_watch.lua — how many clients of this server subscribe to each wake channel: a
leader's process that died has none left. One call covers every shard on one server (the key
only routes it there; PUBSUB counts this server's own subscribers, whatever the slot).
KEYS[1]  {T:s}:lease     STRING  any key of a shard on this server (not read)
ARGV[1..] wake channels ({T:s}:wake)
Returns: {0, n1, n2, ...}  subscribers of each channel, in order
Includes: status
]]
local out = {WQ_OK}
local counts = redis.call('PUBSUB', 'SHARDNUMSUB', unpack(ARGV))
for i = 2, #counts, 2 do
  out[#out + 1] = counts[i]
end
return out
