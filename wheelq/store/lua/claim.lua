--[[ claim.lua — take over entries idle longer than the visibility timeout (XAUTOCLAIM).
An entry already delivered max_deliveries times is not handed out again (XAUTOCLAIM has just
counted one more delivery, so the test is count > max): it is acked and dead-lettered
(reason "deliveries"), so a job that kills its workers runs at most max_deliveries times.
KEYS[1]  {T:s}:stream    STREAM  the stream the group reads: {T:s}:ready, or {T:s}:callbacks (the deliverer)
KEYS[2]  {T:s}:dead      STREAM  dead letters
KEYS[3]  {T:s}:history   HASH    the group's record of a dead-lettered job becomes 'D'
KEYS[4]  {T:s}:waiters   ZSET    results awaited (wq_waited, wq_wake: see ack.lua)
KEYS[5]  {T:s}:done      STREAM  one entry naming the awaited records written
KEYS[6]  {T:s}:limits    HASH    "events", "events_age": the topic's events setting (wheelq.core.events)
KEYS[7]  {T:s}:events    STREAM  job events while the topic has them on (wq_event)
ARGV[1]  consumer group
ARGV[2]  consumer (the claiming worker)
ARGV[3]  min idle, ms (the visibility timeout)
ARGV[4]  cursor: the entry id to scan from ("0-0" to start)
ARGV[5]  most entries to claim
ARGV[6]  max deliveries
Returns: {0, next_cursor, dead_lettered, entry_id_1, deliveries_1, fields_1, entry_id_2, ...}
           next_cursor "0-0" when the scan is complete; deliveries counts this one (2 for an
           entry taken over once); fields are flat field/value lists
         {-1, key}   WRONG_TYPE (nothing written)
]]
wq_events_on(KEYS[6], KEYS[7])
local wrong = wq_wrong_type(KEYS[1], 'stream', KEYS[2], 'stream', KEYS[3], 'hash')
if wrong then return wrong end
local claimed = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4],
  'COUNT', ARGV[5])
local out = {WQ_OK, claimed[1], 0}
local max_deliveries = tonumber(ARGV[6])
local letters = wq_dead_letters(KEYS[1], KEYS[2], KEYS[3], ARGV[1])
for _, entry in ipairs(claimed[2]) do
  local id = entry[1]
  local info = redis.call('XPENDING', KEYS[1], ARGV[1], id, id, 1)[1]
  local deliveries = info and tonumber(info[4]) or 0
  if deliveries > max_deliveries then
    redis.call('XACK', KEYS[1], ARGV[1], id)
    letters.add(id, 'deliveries', 'delivered ' .. (deliveries - 1) .. ' times (max_deliveries '
      .. ARGV[6] .. ') without an ack: its workers died or stalled while running it')
    out[3] = out[3] + 1
  else
    out[#out + 1] = id
    out[#out + 1] = deliveries
    out[#out + 1] = entry[2]
  end
end
letters.tell(KEYS[4], KEYS[5])
return out
