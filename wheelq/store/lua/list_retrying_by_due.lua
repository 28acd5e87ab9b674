--[[ list_retrying_by_due.lua — a page of one shard's pending retries in (due, member) order,
after a keyset position, read at one instant: the whole index of pending retries (retry.lua)
sorted by due time, when it holds at most ARGV[7] members (a larger one is walked by due time
in the sorted set instead: list_pending.lua, whose rows say which are retries).
KEYS[1]  {T:s}:retries   ZSET    pending retries' members, score 0 (byte order)
KEYS[2]  {T:s}:delayed   ZSET    job id -> due ms
KEYS[3]  {T:s}:jobs      HASH    job id -> envelope
ARGV[1]  lowest due ms, inclusive ('-inf': none)
ARGV[2]  highest due ms, exclusive ('+inf': none)
ARGV[3]  the position to go on from: a due ms ('': from the first)
ARGV[4]  the position's member: rows after (ARGV[3], ARGV[4]) in (due, member byte) order
ARGV[5]  rows, 1-1000
ARGV[6]  the largest envelope returned whole, bytes (a larger one comes back as its size;
         0: neither)
ARGV[7]  the most members the index may hold to be sorted here (at most 5000: one ZMSCORE)
Returns: {0, more, member, due, envelope or size, ...}   rows in order, up to ARGV[5]; more:
           1 when rows follow the last one
         {0, -1}     the index holds more than ARGV[7] members (nothing read)
         {-1, key}   WRONG_TYPE
Includes: job_lists, status
]]
local wrong = wq_wrong_type(KEYS[1], 'zset', KEYS[2], 'zset', KEYS[3], 'hash')
if wrong then return wrong end
if redis.call('ZCARD', KEYS[1]) > tonumber(ARGV[7]) then
  return {WQ_OK, -1}
end
-- Members due at the same ms are in byte order, as the sorted set orders them.
local before = wq_bytes_before
local low = ARGV[1] ~= '-inf' and tonumber(ARGV[1]) or nil
local high = ARGV[2] ~= '+inf' and tonumber(ARGV[2]) or nil
local after_due, after_member = tonumber(ARGV[3]), ARGV[4]
local count = tonumber(ARGV[5])
local members = redis.call('ZRANGE', KEYS[1], 0, -1)
local dues = #members > 0 and redis.call('ZMSCORE', KEYS[2], unpack(members)) or {}
local rows = {}
for i, member in ipairs(members) do
  local due = dues[i] and tonumber(dues[i]) -- false: it fired or was cancelled meanwhile
  if due and (not low or due >= low) and (not high or due < high)
      and (not after_due or due > after_due or (due == after_due and before(after_member, member))) then
    rows[#rows + 1] = {due, member}
  end
end
wq_sort_rows(rows)
local page, page_dues = {}, {}
for i = 1, math.min(count, #rows) do
  page[i], page_dues[i] = rows[i][2], rows[i][1]
end
return wq_list_rows(KEYS[3], page, page_dues, tonumber(ARGV[6]), {WQ_OK, #rows > count and 1 or 0})
