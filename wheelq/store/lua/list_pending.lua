--[[ list_pending.lua — a page of one shard's pending jobs in (due, member) order, after a
keyset position, read at one instant. The start is found by rank (ZRANK of the last member
read, or, when it is gone, a binary search among the members due at the same ms), never by
reading past rows; so a page costs O(log n + count) whatever the backlog.
KEYS[1]  {T:s}:delayed   ZSET    job id -> due ms
KEYS[2]  {T:s}:jobs      HASH    job id -> envelope
KEYS[3]  {T:s}:retries   ZSET    pending retries' members: each row says whether it is one
ARGV[1]  lowest due ms, inclusive ('-inf': none)
ARGV[2]  highest due ms, exclusive ('+inf': none)
ARGV[3]  the last row read: its due ms ('': start from ARGV[1])
ARGV[4]  the last row read: its member
ARGV[5]  rows, 1-1000
ARGV[6]  the largest envelope returned whole, bytes (a larger one comes back as its size;
         0: every envelope as its size, for a caller that needs only ids and due times)
Returns: {0, member, due, envelope or size, retry (1 | 0), ...}   rows in order, up to ARGV[5]
         {-1, key}   WRONG_TYPE
]]
local wrong = wq_wrong_type(KEYS[1], 'zset', KEYS[2], 'hash', KEYS[3], 'zset')
if wrong then return wrong end
-- Members due at the same ms are in byte order (memcmp); Lua's own < on strings follows
-- the locale, so bytes are compared here.
local function before(a, b)
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x < y
    end
  end
  return #a < #b
end
local start = 0
if ARGV[1] ~= '-inf' then
  start = redis.call('ZCOUNT', KEYS[1], '-inf', '(' .. ARGV[1])
end
if ARGV[3] ~= '' then
  local due, member = ARGV[3], ARGV[4]
  local at = redis.call('ZSCORE', KEYS[1], member)
  local from
  if at and tonumber(at) == tonumber(due) then
    from = redis.call('ZRANK', KEYS[1], member) + 1
  else -- gone: the first member due later, or due then and after it in byte order
    local lo = redis.call('ZCOUNT', KEYS[1], '-inf', '(' .. due)
    local hi = redis.call('ZCOUNT', KEYS[1], '-inf', due)
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      if before(member, redis.call('ZRANGE', KEYS[1], mid, mid)[1]) then
        hi = mid
      else
        lo = mid + 1
      end
    end
    from = lo
  end
  start = math.max(start, from)
end
local count = tonumber(ARGV[5])
local found = redis.call('ZRANGE', KEYS[1], start, start + count - 1, 'WITHSCORES')
local members, dues = {}, {}
local high = ARGV[2] ~= '+inf' and tonumber(ARGV[2])
for i = 1, #found, 2 do
  if high and tonumber(found[i + 1]) >= high then
    break
  end
  members[#members + 1], dues[#dues + 1] = found[i], found[i + 1]
end
local rows = wq_list_rows(KEYS[2], members, dues, tonumber(ARGV[6]), {})
local out = {WQ_OK}
for i = 1, #members do
  local at = (i - 1) * 3
  out[#out + 1] = rows[at + 1]
  out[#out + 1] = rows[at + 2]
  out[#out + 1] = rows[at + 3]
  out[#out + 1] = redis.call('ZSCORE', KEYS[3], members[i]) and 1 or 0
end
return out
