--[[ includes/waiters.lua — results' waiters (wheelq.producer.results; docs/architecture.md
"Job results"): `waiters` ({T:s}:waiters, ZSET) holds "id<US>group" (the history field of the
outcome awaited) -> ms the wait ends; a waiter reads `done` ({T:s}:done, STREAM) from before it
looked the job up. A script that settles entries asks wq_waited once per call (one EXISTS:
nothing more when nobody waits on the shard), then wq_wake adds one entry naming each waited
field it settled (`fields`: every `step`-th item from the first; ack passes its field/record
pairs). redis.pcall: a key of another type wakes nobody, and fails nothing.
Includes: none
]]
local WQ_DONE_KEEP_MS = '10000' -- {T:s}:done expires this long after its last entry
local WQ_DONE_MAXLEN = '1000' -- about this many entries kept (a waiter reading a full
                              -- COUNT looks the job up again: it may have missed one)

local function wq_waited(waiters)
  return redis.call('EXISTS', waiters) == 1
end

local function wq_wake(waiters, done, fields, step)
  local woken = {}
  for i = 1, #fields, step or 1 do
    local score = redis.pcall('ZSCORE', waiters, fields[i])
    if type(score) == 'string' then
      woken[#woken + 1] = fields[i]
      woken[#woken + 1] = '1'
    end
  end
  for i = 1, #woken, 2000 do
    redis.pcall('XADD', done, 'MAXLEN', '~', WQ_DONE_MAXLEN, '*',
      unpack(woken, i, math.min(i + 1999, #woken)))
  end
  if #woken > 0 then
    redis.pcall('PEXPIRE', done, WQ_DONE_KEEP_MS)
  end
end
