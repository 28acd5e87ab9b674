--[[ list_held.lua — a page of a shard's due line in the order its jobs will enter the stream
(docs/architecture.md, "The due line", "Job lists"): what `ready` lists after the stream's
entries. The lanes take turns as wq_take gives them (the lane whose turn comes first gives its
lowest order key, its next turn 1/weight later), played out here without taking anything:
with one lane that is the lane's own order (a ZRANGE); with several, at most ARGV[4] places
are played out a call (a page past them reads as the line's end). Nothing written.
KEYS[1]  {T:s}:held      HASH    member -> "<due ms> <lane>" (includes/held.lua)
KEYS[2]  {T:s}:turns     ZSET    lane -> its next turn; each lane's key is named after KEYS[1]
KEYS[3]  {T:s}:weights   HASH    key -> weight (absent: 1)
KEYS[4]  {T:s}:jobs      HASH    member -> envelope
ARGV[1]  the place on the line of the first row (0: the job that goes next)
ARGV[2]  count: most rows
ARGV[3]  the largest envelope returned whole, bytes (a larger one comes back as its size)
ARGV[4]  most places played out with several lanes (ARGV[1] + ARGV[2] beyond it are cut)
Returns: {0, more, member_1, due_1, envelope_1, ...}   more: 1 when the line holds more
           rows after these; envelope_n: the envelope, its size when larger than ARGV[3],
           or nil when gone
         {-1, key}   WRONG_TYPE
Includes: base, job_lists, status
]]
local wrong = wq_wrong_type(KEYS[1], 'hash', KEYS[2], 'zset', KEYS[3], 'hash', KEYS[4], 'hash')
if wrong then return wrong end
local from, count = tonumber(ARGV[1]), tonumber(ARGV[2])
local max_env, most = tonumber(ARGV[3]), tonumber(ARGV[4])
local lanes = string.sub(KEYS[1], 1, -5) .. 'lane:'
local turns = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
local members, more = {}, 0
if #turns > 2 and from >= most then
  turns = {} -- past what a call plays out: the page reads as the line's end
end
if #turns == 2 then -- one lane: its order is the line's
  members = redis.call('ZRANGE', lanes .. turns[1], from, from + count - 1)
  if redis.call('ZCARD', lanes .. turns[1]) > from + count then
    more = 1
  end
elseif #turns > 2 then
  -- A binary heap of lanes by (turn, lane), as ZRANGE orders the turns.
  local heap = {}
  local function before(a, b)
    if a.turn ~= b.turn then
      return a.turn < b.turn
    end
    return wq_bytes_before(a.lane, b.lane)
  end
  local function push(x)
    heap[#heap + 1] = x
    local i = #heap
    while i > 1 do
      local p = math.floor(i / 2)
      if not before(heap[i], heap[p]) then
        break
      end
      heap[i], heap[p] = heap[p], heap[i]
      i = p
    end
  end
  local function pop()
    local top = heap[1]
    heap[1] = heap[#heap]
    heap[#heap] = nil
    local i = 1
    while true do
      local l, r, m = 2 * i, 2 * i + 1, i
      if heap[l] and before(heap[l], heap[m]) then
        m = l
      end
      if heap[r] and before(heap[r], heap[m]) then
        m = r
      end
      if m == i then
        return top
      end
      heap[i], heap[m] = heap[m], heap[i]
      i = m
    end
  end
  for i = 1, #turns, 2 do
    local lane = turns[i]
    local w = 1
    if lane ~= '' then
      w = tonumber(redis.call('HGET', KEYS[3], string.sub(lane, 3))) or 1
    end
    push({turn = tonumber(turns[i + 1]), lane = lane, step = 1 / w, got = {}, at = 0, read = 0})
  end
  local last = math.min(from + count, most)
  local place = 0
  while place < last and #heap > 0 do
    local x = pop()
    if x.at >= #x.got then -- read the lane's next members, 64 at a time
      x.got = redis.call('ZRANGE', lanes .. x.lane, x.read, x.read + 63)
      x.read, x.at = x.read + #x.got, 0
    end
    if x.at < #x.got then
      x.at = x.at + 1
      if place >= from then
        members[#members + 1] = x.got[x.at]
      end
      place = place + 1
      x.turn = x.turn + x.step
      push(x)
    end
  end
  if place == last and last < from + count then
    more = 0 -- played out as far as a call may: the page ends here
  elseif #heap > 0 and place == last then
    more = 1 -- a lane with a member not listed yet is still in the heap (or may be: ask)
  end
end
local out = {WQ_OK, more}
local dues = {}
if #members > 0 then
  local at = wq_multi('HMGET', KEYS[1], members)
  for i = 1, #members do
    dues[i] = at[i] and string.match(at[i], '^(%-?%d+)') or false
  end
end
return wq_list_rows(KEYS[4], members, dues, max_env, out)
