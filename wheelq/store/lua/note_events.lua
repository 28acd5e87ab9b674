--[[ note_events.lua — events a role reports itself, not a script's change: a worker's
handlers started, a topic or group paused or resumed (wheelq.core.events). Written only while
the topic has events on, in one entry (wq_events).
KEYS[1]  {T:s}:limits    HASH    "events": the events stream's cap while events are on
KEYS[2]  {T:s}:events    STREAM  job events while the topic has them on (wq_event)
ARGV[1]  kind: started | paused | resumed
ARGV[2]  consumer group ('' for none: a topic paused or resumed as a whole)
ARGV[3..] job id, attempt, job id, attempt, ... (none for paused and resumed)
Returns: {0, written}: the events written (0 while events are off)
Includes: events, status
]]
wq_events_on(KEYS[1], KEYS[2])
if not WQ_EVENTS then
  return {WQ_OK, 0}
end
if #ARGV < 3 then
  wq_event(ARGV[1], nil, ARGV[2])
  return {WQ_OK, 1}
end
local jobs = {}
for i = 3, #ARGV - 1, 2 do
  jobs[#jobs + 1] = ARGV[i]
  jobs[#jobs + 1] = tonumber(ARGV[i + 1]) or 0
end
wq_events(ARGV[1], ARGV[2], jobs)
return {WQ_OK, #jobs / 2}
