--[[ preload.lua — read the next page of jobs due within the window, plan the next read, and
set the horizon to cover every job that read could come too late for; writes at or below the
horizon are noted in the inbox, so pages and inbox together miss nothing. A full page runs to
the end of its last millisecond. The plan (ARGV[6] > 0): the next read between ARGV[6]
and ARGV[7] from now, the horizon half a window past it, even below an earlier plan's
reach (docs/architecture.md, "The life of a job", invariant 4).
KEYS[1]  {T:s}:delayed   ZSET    job id -> due ms
KEYS[2]  {T:s}:lease     STRING  token of the leader
KEYS[3]  {T:s}:horizon   STRING  ms up to which new jobs are noted in the inbox
ARGV[1]  the caller's lease token
ARGV[2]  cursor: ms already read up to (exclusive lower bound of this page)
ARGV[3]  window, ms: read up to TIME + window
ARGV[4]  limit: jobs per page (before the last-millisecond extension)
ARGV[5]  lease ttl, ms: the horizon expires this long after the time it names (a leader reads
         again before then; with no leader, producers soon stop writing notes nobody reads)
ARGV[6]  least time to the next read, ms; 0: plan nothing (the next read is due now and the
         horizon is the cursor)
ARGV[7]  most time to the next read, ms
ARGV[8]  overdue bound, ms: report whether any job is due at or before it (the sweep's bound)
Returns: {0, new_cursor, server_now_ms, full, next_read_ms, overdue, id_1, due_1, ...}
           full      1 when the page was full (read again at once)
           next_read server ms at which the next read is due (the plan above)
           overdue   1 when a job is due at or before ARGV[8]
         {-2}        LEASE_LOST: the caller does not hold the lease (nothing written)
Includes: base, status
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
local least, most = tonumber(ARGV[6]), tonumber(ARGV[7])
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local first_due = first[2] and tonumber(first[2])
local overdue = (first_due and first_due <= tonumber(ARGV[8])) and 1 or 0
local next_read, reach = now, cursor
if full == 0 and least > 0 then
  if not first_due then
    next_read = now + most
  elseif first_due <= upper then
    next_read = now + least
  else
    next_read = math.max(now + least, math.min(first_due - tonumber(ARGV[3]), now + most))
  end
  reach = math.max(cursor, next_read + math.floor(tonumber(ARGV[3]) / 2))
end
redis.call('SET', KEYS[3], wq_fmt(reach), 'PX', math.max(reach - now, 0) + tonumber(ARGV[5]))
local out = {WQ_OK, wq_fmt(cursor), wq_fmt(now), full, wq_fmt(next_read), overdue}
for i = 1, #page do
  out[#out + 1] = page[i]
end
return out
