--[[ far_promote.lua — fenced move of the far tier's next leaf into the sorted set and job
hash, up to ARGV[3] records a call (docs/architecture.md, "The far tier", invariant 14). The
leaf promoted is the earliest, once its start is within the horizon (every leaf when the
topic has no far tier any more); no job is put in a leaf starting within the horizon, so
none is added to it meanwhile. A record moves only while the index still points at it, and
its index entry goes in the same call, so a record moves at most once whoever calls and
however often; a call on a leaf already begun goes on from where the last one stopped.
KEYS[1]  {T:s}:lease     STRING  token of the leader
KEYS[2]  {T:s}:far       HASH    the far tier's meta (wq_far_state)
KEYS[3]  {T:s}:delayed   ZSET    job id -> due ms
KEYS[4]  {T:s}:jobs      HASH    job id -> envelope
KEYS[5]  {T:s}:horizon   STRING  ms the leader has preloaded up to (absent: no leader)
KEYS[6]  {T:s}:inbox     LIST    "due:id" notes for the leader
KEYS[7]  {T:s}:limits    HASH    "far": the topic's far horizon, ms (0: none now, so every leaf
         is promoted; absent: WQ_FAR_DEFAULT)
ARGV[1]  the caller's lease token
ARGV[2]  wake channel: one SPUBLISH for the call's notes, a line each
ARGV[3]  most records to read this call
Returns: {0, moved, skipped, more, next_ms}
           moved    jobs moved into the sorted set
           skipped  dead records passed over (cancelled, rescheduled or replaced)
           more     1 when a leaf is due for promotion still (call again at once)
           next_ms  Redis ms at which the next leaf comes within the horizon, -1: none
         {-2}       LEASE_LOST: the caller does not hold the lease (nothing written)
Includes: base, far_tier, pending, status
]]
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {WQ_LEASE_LOST}
end
local far = wq_far_state(KEYS[2], redis.call('HGET', KEYS[7], 'far'))
if far.entries <= 0 and redis.call('EXISTS', KEYS[2] .. ':buckets') == 0 then
  return {WQ_OK, 0, 0, 0, -1} -- nothing far (the usual answer: one read)
end
local buckets = KEYS[2] .. ':buckets'
local now = wq_now_ms()
-- Leaves starting before `reach` are due for promotion: all of them with no far tier.
local reach = far.horizon > 0 and now + far.horizon or math.huge
local first = redis.call('ZRANGE', buckets, 0, 0, 'WITHSCORES')
local function next_ms()
  local after = redis.call('ZRANGE', buckets, 0, 0, 'WITHSCORES')
  if #after == 0 or far.horizon <= 0 then
    return #after == 0 and -1 or now
  end
  return math.max(now, tonumber(after[2]) - far.horizon)
end
if #first == 0 or tonumber(first[2]) >= reach then
  return {WQ_OK, 0, 0, 0, next_ms()}
end
local leaf = tonumber(first[1])
local start, level = far:leaf(leaf)
-- 'at' is "leaf:position": how far the last call got, in the leaf it names.
local at = 0
local begun, position = string.match(redis.call('HGET', KEYS[2], 'at') or '', '^(%d+):(%d+)$')
if begun == first[1] then
  at = tonumber(position)
end
local key = far:key(leaf)
local records = redis.call('LRANGE', key, at, at + tonumber(ARGV[3]) - 1)
local horizon = tonumber(redis.call('GET', KEYS[5]))
local hset, zadd, notes, m = {}, {}, {}, 0
local moved, skipped = 0, 0
for i, record in ipairs(records) do
  local id, due, envelope = far.unpack(record, start, level)
  local fp, h = far.fp(id)
  local ix = far:index(h)
  if redis.call('HGET', ix, fp) == far.loc(leaf, at + i - 1) then
    redis.call('HDEL', ix, fp)
    hset[m + 1], hset[m + 2], zadd[m + 1], zadd[m + 2] = id, envelope, due, id
    m = m + 2
    moved = moved + 1
    if horizon and due <= horizon then
      notes[#notes + 1] = wq_note(due, id)
    end
  else
    skipped = skipped + 1
  end
end
if m > 0 then
  wq_multi('HSET', KEYS[4], hset)
  wq_multi('ZADD', KEYS[3], zadd)
  far.entries = far.entries - moved
  redis.call('HINCRBY', KEYS[2], 'entries', -moved)
  far:live(leaf, -moved)
end
if #notes > 0 then
  wq_multi('RPUSH', KEYS[6], notes)
  redis.call('SPUBLISH', ARGV[2], table.concat(notes, '\n'))
end
at = at + #records
if at >= redis.call('LLEN', key) then
  redis.call('DEL', key)
  redis.call('ZREM', buckets, first[1])
  redis.call('HDEL', KEYS[2] .. ':live', first[1])
  redis.call('HDEL', KEYS[2], 'at')
else
  redis.call('HSET', KEYS[2], 'at', first[1] .. ':' .. wq_fmt(at))
end
local following = redis.call('ZRANGE', buckets, 0, 0, 'WITHSCORES')
local more = (#following > 0 and tonumber(following[2]) < reach) and 1 or 0
return {WQ_OK, moved, skipped, more, next_ms()}
