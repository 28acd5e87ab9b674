--[[ process_beat.lua — a process's heartbeat: its record written and its expiry moved on (or,
with an empty record, the process gone at once), and records already expired removed
(docs/architecture.md, "Processes"). The expiry is on the server's clock (TIME): the
processes beating run on any host, and a worker keeps no Redis clock.
KEYS[1]  wheelq:{processes}          ZSET  process id -> expiry, Redis ms
KEYS[2]  wheelq:{processes}:records  HASH  process id -> msgpack record (wheelq.core.process)
ARGV[1]  process id
ARGV[2]  its record ('': the process leaves)
ARGV[3]  ttl, ms: the record expires this long after the server's now
ARGV[4]  most expired records this call removes (>= 1)
Returns: {0, now}  now: the server's clock, ms
Includes: none
]]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if ARGV[2] == '' then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[2], ARGV[1])
else
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
end
local gone = redis.call('ZRANGE', KEYS[1], '-inf', now, 'BYSCORE', 'LIMIT', 0, tonumber(ARGV[4]))
if #gone > 0 then
  redis.call('ZREM', KEYS[1], unpack(gone))
  redis.call('HDEL', KEYS[2], unpack(gone))
end
return {0, now}
