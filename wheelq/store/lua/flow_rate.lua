--[[ flow_rate.lua — take a start from a GCRA rate bucket (wheelq.core.flow).
A start is allowed at max(TAT - tolerance, now); it is reserved (the theoretical arrival
time moves on by one interval) when that is at most ARGV[3] away, so reserved starts are
spaced one interval apart whoever takes them.
KEYS[1]  wheelq:flow:{topic:digest}:rate  STRING  the bucket's theoretical arrival time, µs
ARGV[1]  interval between starts, µs
ARGV[2]  burst: starts allowed back to back (>= 1)
ARGV[3]  longest wait to reserve, µs
Returns: {0, wait, reserved}   wait: µs until the start is allowed; reserved 1 when taken
Includes: base
]]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local tat = math.max(tonumber(redis.call('GET', KEYS[1]) or '0'), now)
local start = math.max(tat - interval * (burst - 1), now)
local wait = start - now
if wait > tonumber(ARGV[3]) then
  return {0, wq_fmt(wait), 0}
end
local new = tat + interval
redis.call('SET', KEYS[1], wq_fmt(new), 'PX', math.ceil((new - now) / 1000) + 1000)
return {0, wq_fmt(wait), 1}
