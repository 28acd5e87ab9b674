--[[ includes/events.lua — job events (wheelq.core.events; docs/architecture.md "Job events").
A script that changes a job's state calls wq_events_on first: while the shard's limits say
events are on (field 'events': the most events the stream keeps), wq_events appends one entry
for the events of one kind and group the call made: fields k (kind), g (group, absent for
none), j (msgpack array job id, attempt, ...: attempt 0 when not known; absent for a group's
paused or resumed) and c (the shard's running count of events written, up to this entry's:
trim.lua keeps the last `events` of them). One entry, not one per event: an XADD costs Redis
some 1.5 us, an event packed into a batch's entry a tenth of that. While events are off this
costs a test. A key of the wrong type fails only the events (pcall), never the change.
Includes: none
]]
local WQ_EVENTS, WQ_EVENTS_CAP, WQ_EVENTS_LIMITS = false, '0', false
local WQ_LIMITS = false -- the shard's limits hash, events on or off (its 'expired' count)
local function wq_events_on(limits, events)
  WQ_LIMITS = limits
  local cap = redis.pcall('HGET', limits, 'events')
  if type(cap) == 'string' then
    WQ_EVENTS, WQ_EVENTS_CAP, WQ_EVENTS_LIMITS = events, cap, limits
  end
end

local function wq_events(kind, group, jobs)
  if not WQ_EVENTS then
    return
  end
  local n = 1
  local f = {'XADD', WQ_EVENTS, 'MAXLEN', '~', WQ_EVENTS_CAP, '*', 'k', kind}
  if type(group) == 'string' and group ~= '' then
    f[#f + 1] = 'g'
    f[#f + 1] = group
  end
  if jobs then
    n = math.floor(#jobs / 2)
    if n < 1 then
      return
    end
    f[#f + 1] = 'j'
    f[#f + 1] = cmsgpack.pack(jobs)
  end
  local count = redis.pcall('HINCRBY', WQ_EVENTS_LIMITS, 'events_n', n)
  if type(count) == 'number' then
    f[#f + 1] = 'c'
    f[#f + 1] = count
  end
  redis.pcall(unpack(f))
end

-- One event of a job (`id`), or of a group or topic (`id` nil: paused, resumed).
local function wq_event(kind, id, group, attempt)
  if WQ_EVENTS then
    wq_events(kind, group, id and {id, tonumber(attempt) or 0} or nil)
  end
end
