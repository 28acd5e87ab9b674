--[[ preload.lua — read the next page of jobs due within the window and raise the horizon.
Everything with due <= horizon that is written after this call is also pushed to the inbox
(enqueue.lua, reschedule.lua), so together the pages and the inbox miss nothing.
A full page is extended to the end of its last millisecond, so a page boundary never splits
one millisecond's jobs (the next page starts after it).
KEYS[1]  {T:s}:delayed   ZSET    job id -> due ms
KEYS[2]  {T:s}:lease     STRING  token of the leader
KEYS[3]  {T:s}:horizon   STRING  ms the leader has preloaded up to
ARGV[1]  the caller's lease token
ARGV[2]  cursor: ms already read up to (exclusive lower bound of this page)
ARGV[3]  window, ms: read up to TIME + window
ARGV[4]  limit: jobs per page (before the last-millisecond extension)
ARGV[5]  horizon ttl, ms (the lease ttl: no leader, no horizon)
Returns: {0, new_cursor, server_now_ms, full, id_1, due_1, ...}   full = 1 when the page was full
         {-2}        LEASE_LOST: the caller does not hold the lease (nothing written)
]]
if redis.call('GET', KEYS[2]) ~= ARGV[1] then
  return {WQ_LEASE_LOST}
end
local now = wq_now_ms()
local upper = now + tonumber(ARGV[3])
local limit = tonumber(ARGV[4])
local page = redis.call('ZRANGE', KEYS[1], '(' .. ARGV[2], wq_fmt(upper), 'BYSCORE', 'LIMIT', 0, limit, 'WITHSCORES')
local cursor = upper
local full = 0
if #page / 2 >= limit then
  full = 1
  local last = page[#page]
  cursor = tonumber(last)
  while #page > 0 and page[#page] == last do
    page[#page] = nil
    page[#page] = nil
  end
  local rest = redis.call('ZRANGE', KEYS[1], last, last, 'BYSCORE', 'WITHSCORES')
  for i = 1, #rest do
    page[#page + 1] = rest[i]
  end
end
local horizon = tonumber(redis.call('GET', KEYS[3]))
if not horizon or cursor > horizon then
  horizon = cursor
end
redis.call('SET', KEYS[3], wq_fmt(horizon), 'PX', ARGV[5])
local out = {WQ_OK, wq_fmt(cursor), wq_fmt(now), full}
for i = 1, #page do
  out[#out + 1] = page[i]
end
return out
