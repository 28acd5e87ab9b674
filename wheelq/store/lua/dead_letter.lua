--[[ dead_letter.lua — ack entries and copy them, with why, into the dead-letter stream.
An entry no longer pending in the group (someone else settled it) is skipped; so is one
pending to another delivery than a pull receipt's (a stale receipt).
KEYS[1]  {T:s}:stream    STREAM  the stream the group reads: {T:s}:ready, or {T:s}:callbacks (the deliverer)
KEYS[2]  {T:s}:dead      STREAM  dead letters
KEYS[3]  {T:s}:history   HASH    the group's record of each job becomes 'D' (wq_dead)
KEYS[4]  {T:s}:waiters   ZSET    results awaited (wq_waited, wq_wake: see ack.lua)
KEYS[5]  {T:s}:done      STREAM  one entry naming the awaited records written
KEYS[6]  {T:s}:limits    HASH    "events", "events_age": the topic's events setting (wheelq.core.events)
KEYS[7]  {T:s}:events    STREAM  job events while the topic has them on (wq_event)
KEYS[8]  {T:s}:followers HASH    jobs waiting on these (includes/follow.lua): told 'D'
KEYS[9]  {T:s}:notices   STREAM  the notices
KEYS[10] {T:s}:inbox     LIST    the leader's inbox: nudged when a notice was added
ARGV[1]  consumer group
ARGV[2]  a pull receipt's consumer ('' for none: a worker's entries, not checked)
ARGV[3]  that receipt's delivery count (wq_delivered checks each entry is pending to it)
ARGV[4..] three per entry: entry id, reason (failed | deliveries | malformed), error text
Returns: {0, dead_lettered, stale}  stale: entries pending to another delivery (not written)
         {-1, key}   WRONG_TYPE (nothing written)
Includes: dead_letters, delivery, events, follow, status
]]
wq_events_on(KEYS[6], KEYS[7])
local wrong = wq_wrong_type(KEYS[1], 'stream', KEYS[2], 'stream', KEYS[3], 'hash')
if wrong then return wrong end
local n, stale = 0, 0
local fenced = ARGV[2] ~= ''
local letters = wq_dead_letters(KEYS[1], KEYS[2], KEYS[3], ARGV[1])
for i = 4, #ARGV, 3 do
  local got = fenced and wq_delivered(KEYS[1], ARGV[1], ARGV[i], ARGV[2], ARGV[3]) or 1
  if got == -1 then
    stale = stale + 1
  elseif got == 1 and redis.call('XACK', KEYS[1], ARGV[1], ARGV[i]) == 1 then
    letters.add(ARGV[i], ARGV[i + 1], ARGV[i + 2])
    n = n + 1
  end
end
letters.tell(KEYS[4], KEYS[5], KEYS[8], KEYS[9], KEYS[10])
return {WQ_OK, n, stale}
