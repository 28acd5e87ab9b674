--[[ processes.lua — the live processes: each record whose expiry is after the server's now,
soonest to expire first (docs/architecture.md, "Processes"). Reads only.
KEYS[1]  wheelq:{processes}          ZSET  process id -> expiry, Redis ms
KEYS[2]  wheelq:{processes}:records  HASH  process id -> msgpack record (wheelq.core.process)
ARGV[1]  most processes returned (>= 1)
Returns: {0, now, id, expiry, record, id, expiry, record, ...}  now: the server's clock, ms;
         a record is false when the hash lacks it
Includes: none
]]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local found = redis.call('ZRANGE', KEYS[1], '(' .. now, '+inf', 'BYSCORE', 'LIMIT', 0,
  tonumber(ARGV[1]), 'WITHSCORES')
local out = {0, now}
if #found == 0 then
  return out
end
local ids = {}
for i = 1, #found, 2 do
  ids[#ids + 1] = found[i]
end
local records = redis.call('HMGET', KEYS[2], unpack(ids))
for i, id in ipairs(ids) do
  out[#out + 1] = id
  out[#out + 1] = found[2 * i]
  out[#out + 1] = records[i]
end
return out
