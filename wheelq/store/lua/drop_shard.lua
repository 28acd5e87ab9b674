--[[ drop_shard.lua — delete every key of one shard of a topic, unless it still has jobs to run.
"Jobs to run": members of the sorted set, and entries of the ready and callbacks streams some
consumer group has not acked (pending in the group, or not yet delivered to it; with no group at all, every entry).
KEYS[1]  {T:s}:delayed   ZSET    job id -> due ms
KEYS[2]  {T:s}:jobs      HASH    job id -> envelope
KEYS[3]  {T:s}:ready     STREAM  fired jobs
KEYS[4]  {T:s}:dead      STREAM  dead letters
KEYS[5]  {T:s}:lease     STRING  token of the leader
KEYS[6]  {T:s}:followed  STRING  the mark of the leader's liveness connection (lease_followed.lua)
KEYS[7]  {T:s}:horizon   STRING  ms the leader has preloaded up to
KEYS[8]  {T:s}:inbox     LIST    "due:id" notes for the leader
KEYS[9]  {T:s}:spooled   ZSET    tokens of replayed spool writes
KEYS[10] {T:s}:history   HASH    where jobs fired and what groups made of them
KEYS[11] {T:s}:history_old HASH  the history's previous generation
KEYS[12] {T:s}:cancelled ZSET    cancelled jobs
KEYS[13] {T:s}:debounce  HASH    debounce deadlines
KEYS[14] {T:s}:limits    HASH    the topic's limits, this shard's share
KEYS[15] {T:s}:schedules HASH    schedules homed here (dropped with the topic)
KEYS[16] {T:s}:sched_state HASH  their planning state
KEYS[17] {T:s}:sched_epoch STRING the schedule planner's fencing epoch
KEYS[18] {T:s}:sched_marks HASH  the latest run of each schedule written here
KEYS[19] {T:s}:callbacks STREAM  fired jobs with a callback (counted as KEYS[3] is)
KEYS[20] {T:s}:retries   ZSET    retries' alias members (counted in KEYS[1] already)
KEYS[21] {T:s}:waiters   ZSET    results awaited
KEYS[22] {T:s}:done      STREAM  notes to the results' waiters
KEYS[23] {T:s}:events    STREAM  job events
KEYS[24] {T:s}:far       HASH    the far tier's meta: its jobs count as pending, and its
         leaves, index hashes, buckets and live counts go with it
KEYS[25] {T:s}:held      HASH    jobs waiting on the due line: they count as pending
KEYS[26] {T:s}:turns     ZSET    the line's lanes: each lane's key goes with it
KEYS[27] {T:s}:weights   HASH    the topic's fair weights, this shard's copy
KEYS[28] {T:s}:keyed     HASH    the key index (includes/keyed.lua): each key's list goes with it
KEYS[29] {T:s}:followers HASH    jobs waiting on this shard's jobs (includes/follow.lua)
KEYS[30] {T:s}:notices   STREAM  outcomes not yet heard by their waiting jobs: they count as
         pending (a waiting job on another topic has yet to hear them)
KEYS[31] {T:s}:waiting   HASH    this shard's waiting jobs' records (resolve.lua; their early
         notes, {T:s}:waiting:<token>, expire by themselves)
         (KEYS[4..18] and those after KEYS[19] are only deleted: every key of the shard,
         wheelq.core.keys.DATA_KEY_NAMES, and the far tier's, the line's and the key index's)
ARGV[1]  mode: 'check' (count, delete nothing) | 'drop' (delete when there is nothing to run)
         | 'force' (delete whatever the shard holds, no counting)
ARGV[2]  most far-tier keys (leaves, index hashes) or key lists to delete this call, >= 1: a
         far tier of millions of jobs has tens of thousands, so it goes in steps, the caller
         calling again while the reply says more; the shard's other keys go in the last step
Returns: {0, dropped, pending, unacked, more}   dropped = 1 when the keys were deleted (UNLINK);
           more = 1: far-tier keys were deleted and some are left (call again; the tier's jobs
           are gone already: its count is 0 from the first step)
         {-1, key}   WRONG_TYPE (check and drop modes; nothing deleted)
Includes: base, far_tier, status
]]
local mode = ARGV[1]
local pending, unacked = 0, 0
if mode ~= 'force' then
  local wrong = wq_wrong_type(KEYS[1], 'zset', KEYS[3], 'stream', KEYS[19], 'stream', KEYS[30],
    'stream')
  if wrong then return wrong end
  pending = redis.call('ZCARD', KEYS[1]) + wq_far_state(KEYS[24]).entries
    + redis.call('HLEN', KEYS[25]) + redis.call('XLEN', KEYS[30])
  for _, stream in ipairs({KEYS[3], KEYS[19]}) do
    if redis.call('EXISTS', stream) == 1 then
      local groups = redis.call('XINFO', 'GROUPS', stream)
      if #groups == 0 then
        unacked = unacked + redis.call('XLEN', stream)
      end
      for _, flat in ipairs(groups) do
        local g = wq_fields(flat)
        -- Entries after the last delivered one: whether any exist is read off the stream; how
        -- many is the server's lag, an estimate (absent or off after deletions), at least 1.
        local undelivered = 0
        if #redis.call('XRANGE', stream, '(' .. g['last-delivered-id'], '+', 'COUNT', 1) > 0 then
          undelivered = 1
          if type(g['lag']) == 'number' and g['lag'] > 1 then
            undelivered = g['lag']
          end
        end
        unacked = unacked + tonumber(g['pending']) + undelivered
      end
    end
  end
end
if mode == 'check' or (mode ~= 'force' and pending + unacked > 0) then
  redis.call('HDEL', KEYS[24], 'dropped') -- a drop begun and refused now starts over
  return {WQ_OK, 0, pending, unacked, 0}
end
-- The far tier's leaves, then its index hashes from 'dropped' (the first not yet deleted) up,
-- at most ARGV[2] keys a call.
local far, step = wq_far_state(KEYS[24]), tonumber(ARGV[2])
local buckets = KEYS[24] .. ':buckets'
local gone, leaves = {}, redis.call('ZRANGE', buckets, 0, step - 1)
for i, leaf in ipairs(leaves) do
  gone[i] = KEYS[24] .. ':' .. leaf
end
local from = tonumber(redis.call('HGET', KEYS[24], 'dropped')) or 0
local addresses = 2 ^ far.level + far.split
local to = math.min(addresses, from + step - #gone) - 1
for address = from, to do
  gone[#gone + 1] = KEYS[24] .. ':ix:' .. wq_fmt(address)
end
if #leaves == step or to < addresses - 1 then
  if #leaves > 0 then
    wq_multi('ZREM', buckets, leaves)
  end
  redis.call('HSET', KEYS[24], 'dropped', wq_fmt(to + 1), 'entries', 0)
  for i = 1, #gone, 4000 do
    redis.call('UNLINK', unpack(gone, i, math.min(i + 3999, #gone)))
  end
  return {WQ_OK, 0, pending, unacked, 1}
end
-- The key index's lists (a shard with no job pending has none left, unless forced), at most
-- ARGV[2] a call.
local listed = redis.call('HSCAN', KEYS[28], 0, 'COUNT', step)[2]
if #listed > 0 then
  local fields = {}
  for i = 1, #listed, 2 do
    fields[#fields + 1] = listed[i]
    gone[#gone + 1] = KEYS[28] .. ':' .. listed[i]
  end
  wq_multi('HDEL', KEYS[28], fields)
  if redis.call('HLEN', KEYS[28]) > 0 then
    for i = 1, #gone, 4000 do
      redis.call('UNLINK', unpack(gone, i, math.min(i + 3999, #gone)))
    end
    return {WQ_OK, 0, pending, unacked, 1}
  end
end
gone[#gone + 1] = buckets
gone[#gone + 1] = KEYS[24] .. ':live'
local lanes = string.sub(KEYS[25], 1, -5) .. 'lane:'
for _, lane in ipairs(redis.call('ZRANGE', KEYS[26], 0, -1)) do
  gone[#gone + 1] = lanes .. lane
end
for _, key in ipairs(KEYS) do
  gone[#gone + 1] = key
end
for i = 1, #gone, 4000 do
  redis.call('UNLINK', unpack(gone, i, math.min(i + 3999, #gone)))
end
return {WQ_OK, 1, pending, unacked, 0}
