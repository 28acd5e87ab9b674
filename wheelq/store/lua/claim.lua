--[[ claim.lua — take over entries idle longer than the visibility timeout (XAUTOCLAIM).
An entry already delivered max_deliveries times is not handed out again (XAUTOCLAIM has just
counted one more delivery, so the test is count > max): it is acked and dead-lettered
(reason "deliveries"), so a job that kills its workers runs at most max_deliveries times.
An entry that fired before a cancel of its job (the cancel's fence, wq_fenced) is not handed
out again either: it is acked, and the group's record becomes 'C' (a cancel is final).
KEYS[1]  {T:s}:stream    STREAM  the stream the group reads: {T:s}:ready, or {T:s}:callbacks (the deliverer)
KEYS[2]  {T:s}:dead      STREAM  dead letters
KEYS[3]  {T:s}:history   HASH    the group's record of a dead-lettered job becomes 'D'
KEYS[4]  {T:s}:waiters   ZSET    results awaited (wq_waited, wq_wake: see ack.lua)
KEYS[5]  {T:s}:done      STREAM  one entry naming the awaited records written
KEYS[6]  {T:s}:limits    HASH    "events", "events_age": the topic's events setting (wheelq.core.events)
KEYS[7]  {T:s}:events    STREAM  job events while the topic has them on (wq_event)
KEYS[8]  {T:s}:history_old HASH  the history's previous generation (the fence is read there too)
KEYS[9]  {T:s}:ready     STREAM  the ready stream: KEYS[1] is it, or the callbacks stream
KEYS[10] {T:s}:followers HASH    jobs waiting on these (includes/follow.lua): told 'D' of a job
         dead-lettered, 'C' of one cancelled
KEYS[11] {T:s}:notices   STREAM  the notices
KEYS[12] {T:s}:inbox     LIST    the leader's inbox: nudged when a notice was added
ARGV[1]  consumer group
ARGV[2]  consumer (the claiming worker)
ARGV[3]  min idle, ms (the visibility timeout)
ARGV[4]  cursor: the entry id to scan from ("0-0" to start)
ARGV[5]  most entries to claim
ARGV[6]  max deliveries
Returns: {0, next_cursor, dead_lettered, entry_id_1, deliveries_1, fields_1, entry_id_2, ...}
           next_cursor "0-0" when the scan is complete; deliveries counts this one (2 for an
           entry taken over once); fields are flat field/value lists; entries cancelled
           (acked for the fence) are in none of these
         {-1, key}   WRONG_TYPE (nothing written)
Includes: base, dead_letters, events, follow, history, status, waiters
]]
wq_events_on(KEYS[6], KEYS[7])
local wrong = wq_wrong_type(KEYS[1], 'stream', KEYS[2], 'stream', KEYS[3], 'hash')
if wrong then return wrong end
local claimed = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4],
  'COUNT', ARGV[5])
local out = {WQ_OK, claimed[1], 0}
local max_deliveries = tonumber(ARGV[6])
local letters = wq_dead_letters(KEYS[1], KEYS[2], KEYS[3], ARGV[1])
local cancelled = {}
for _, entry in ipairs(claimed[2]) do
  local id = entry[1]
  local info = redis.call('XPENDING', KEYS[1], ARGV[1], id, id, 1)[1]
  local deliveries = info and tonumber(info[4]) or 0
  local job = type(entry[2]) == 'table' and wq_fields(entry[2])['id']
  if job and wq_fenced(KEYS[3], KEYS[8], job, id, KEYS[1] ~= KEYS[9]) then
    redis.call('XACK', KEYS[1], ARGV[1], id)
    local field = job .. WQ_US .. ARGV[1]
    local last = wq_read_record(wq_hget(KEYS[3], KEYS[8], field))
    local err = last and last[1] == 'F' and last[2] == id and last[5] or ''
    redis.call('HSET', KEYS[3], field, wq_record('C', id, wq_now_ms(), 0, err, '', ''))
    cancelled[#cancelled + 1] = field
  elseif deliveries > max_deliveries then
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
letters.tell(KEYS[4], KEYS[5], KEYS[10], KEYS[11], KEYS[12])
if #cancelled > 0 and wq_waited(KEYS[4]) then
  wq_wake(KEYS[4], KEYS[5], cancelled)
end
if #cancelled > 0 and wq_followed(KEYS[10])
    and wq_tell_fields(KEYS[10], KEYS[11], cancelled, 1, 'C') > 0 then
  wq_nudge(KEYS[12], KEYS[10])
end
return out
