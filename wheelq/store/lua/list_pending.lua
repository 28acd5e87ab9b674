--[[ list_pending.lua — a page of one shard's pending jobs in (due, member) order, after a
keyset position, read at one instant: the sorted set's rows merged with the far tier's
(docs/architecture.md, "The far tier", invariant 14; the sorted set holds jobs due beyond
the horizon too, so the two interleave). The sorted set's start is found by rank (ZRANK of
the last member read, or, when it is gone, a binary search among the members due at the
same ms), never by reading past rows; the far tier is read a leaf at a time, in time order,
from the leaf covering the start: its live records in range, sorted (at most 512). A call
reads at most WQ_LIST_FAR_READ far records (and always a whole leaf): when they run out, the
page stops short at the start of the first leaf not read, and says where to go on from.
KEYS[1]  {T:s}:delayed   ZSET    job id -> due ms
KEYS[2]  {T:s}:jobs      HASH    job id -> envelope
KEYS[3]  {T:s}:retries   ZSET    pending retries' members: each row says whether it is one
KEYS[4]  {T:s}:far       HASH    the far tier's meta (wq_far_state): its leaves and index (a
         shard with no far job costs this HMGET)
ARGV[1]  lowest due ms, inclusive ('-inf': none)
ARGV[2]  highest due ms, exclusive ('+inf': none)
ARGV[3]  the position to go on from: a due ms ('': start from ARGV[1])
ARGV[4]  the position's member: rows after (ARGV[3], ARGV[4]) in (due, member byte) order
         ('' with a due ms: every row due from then on)
ARGV[5]  rows, 1-1000
ARGV[6]  the largest envelope returned whole, bytes (a larger one comes back as its size;
         0: neither, for a caller that needs only ids and due times)
ARGV[7]  '1': each row carries its envelope's stamp too (wq_stamp: a bulk action's selection
         records it); absent or '': not
Returns: {0, more, next due, next member, passed, member, due, envelope or size, [stamp,]
          retry (1 | 0), ...}   rows in order, up to ARGV[5]
           more       1: rows may follow; go on from (next due, next member): the last row,
                      or, on a page cut short by the far records' bound, (the start of the
                      first leaf not read, '') ('', '' when more is 0)
           passed     far records read and not returned (dead, out of range or not reached)
         {-1, key}   WRONG_TYPE
Includes: base, far_tier, job_lists, status
]]
local wrong = wq_wrong_type(KEYS[1], 'zset', KEYS[2], 'hash', KEYS[3], 'zset', KEYS[4], 'hash')
if wrong then return wrong end
local WQ_LIST_FAR_READ = 1024
-- Members due at the same ms are in byte order, as the sorted set orders them.
local before = wq_bytes_before
local count = tonumber(ARGV[5])
local low = ARGV[1] ~= '-inf' and tonumber(ARGV[1]) or nil
local high = ARGV[2] ~= '+inf' and tonumber(ARGV[2]) or nil
local after_due, after_member = tonumber(ARGV[3]), ARGV[4]
-- The sorted set: up to count + 1 rows from the start (one more says whether rows follow).
local start = 0
if low then
  start = redis.call('ZCOUNT', KEYS[1], '-inf', '(' .. ARGV[1])
end
if after_due then
  local at = redis.call('ZSCORE', KEYS[1], after_member)
  local from
  if at and tonumber(at) == after_due then
    from = redis.call('ZRANK', KEYS[1], after_member) + 1
  else -- gone: the first member due later, or due then and after it in byte order
    local lo = redis.call('ZCOUNT', KEYS[1], '-inf', '(' .. ARGV[3])
    local hi = redis.call('ZCOUNT', KEYS[1], '-inf', ARGV[3])
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      if before(after_member, redis.call('ZRANGE', KEYS[1], mid, mid)[1]) then
        hi = mid
      else
        lo = mid + 1
      end
    end
    from = lo
  end
  start = math.max(start, from)
end
local found = redis.call('ZRANGE', KEYS[1], start, start + count, 'WITHSCORES')
local hot, hot_due = {}, {}
for i = 1, #found, 2 do
  local due = tonumber(found[i + 1])
  if high and due >= high then
    break
  end
  hot[#hot + 1], hot_due[#hot_due + 1] = found[i], due
end
-- The far tier: `leaf`, `leaf_start` the next leaf to read (nil: none left in range).
local far = wq_far_state(KEYS[4]) -- its horizon does not matter: every far job is listed
local buckets = KEYS[4] .. ':buckets'
local leaf, leaf_start
local function leaf_from(found)
  leaf, leaf_start = tonumber(found[1]), tonumber(found[2])
  if not leaf or (high and leaf_start >= high) then
    leaf, leaf_start = nil, nil
  end
end
local from = math.max(low or -math.huge, after_due or -math.huge) -- no row is due earlier
if far.entries > 0 then -- the first leaf: the one covering `from`, else the first after it
  local after = '-inf'
  if from > -math.huge then
    after = '(' .. wq_fmt(from)
    leaf_from(redis.call('ZRANGE', buckets, wq_fmt(from), '-inf', 'BYSCORE', 'REV', 'LIMIT', 0,
      1, 'WITHSCORES'))
    if leaf and leaf_start + far:span(select(2, far:leaf(leaf))) <= from then
      leaf = nil -- it ends before `from`
    end
  end
  if not leaf then
    leaf_from(redis.call('ZRANGE', buckets, after, '+inf', 'BYSCORE', 'LIMIT', 0, 1, 'WITHSCORES'))
  end
end
local read, passed = 0, 0
-- The next leaf's live records in range and after the position, sorted: {due, id, envelope}.
local function read_leaf()
  local s, level = far:leaf(leaf)
  local records = redis.call('LRANGE', far:key(leaf), 0, -1)
  read = read + #records
  local rows = {}
  for position, record in ipairs(records) do
    local due = far.due(record, s, level)
    if due >= from and not (high and due >= high) then
      local id, _, envelope = far.unpack(record, s, level)
      if (due ~= after_due or before(after_member, id)) and far:indexed(id, leaf, position - 1) then
        rows[#rows + 1] = {due, id, envelope}
      end
    end
  end
  passed = passed + #records - #rows
  wq_sort_rows(rows)
  leaf_from(redis.call('ZRANGE', buckets, '(' .. wq_fmt(s), '+inf', 'BYSCORE', 'LIMIT', 0, 1,
    'WITHSCORES'))
  return rows
end
-- The merge: a far row is taken once every leaf that could hold an earlier one is read.
local members, dues, held = {}, {}, {}
local h, rows, f = 1, {}, 1
local cut = false
while #members < count do
  local row, n = rows[f], #members + 1
  if not row and leaf and (not hot[h] or leaf_start <= hot_due[h]) then
    if read > 0 and read + redis.call('LLEN', far:key(leaf)) > WQ_LIST_FAR_READ then
      cut = true
      break
    end
    rows, f = read_leaf(), 1
  elseif row and (not hot[h] or row[1] < hot_due[h]
      or (row[1] == hot_due[h] and before(row[2], hot[h]))) then
    members[n], dues[n], held[n] = row[2], wq_fmt(row[1]), row[3]
    f = f + 1
  elseif hot[h] then
    members[n], dues[n], held[n] = hot[h], found[2 * h], false
    h = h + 1
  else
    break
  end
end
passed = passed + #rows - f + 1 -- read, not reached
local out = {WQ_OK, 0, '', '', 0}
if cut then
  out[2], out[3] = 1, wq_fmt(leaf_start)
elseif #members == count and (hot[h] or rows[f] or leaf) then
  out[2], out[3], out[4] = 1, dues[count], members[count]
end
out[5] = passed
local stamps = ARGV[7] == '1'
local listed = wq_list_rows(KEYS[2], members, dues, tonumber(ARGV[6]), {}, held, stamps)
local width = stamps and 4 or 3
for i = 1, #members do
  local at = (i - 1) * width
  for j = 1, width do
    out[#out + 1] = listed[at + j]
  end
  out[#out + 1] = not held[i] and redis.call('ZSCORE', KEYS[3], members[i]) and 1 or 0
end
return out
