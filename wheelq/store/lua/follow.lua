--[[ follow.lua — a job waits on an outcome of this shard's job ARGV[2] in group ARGV[3]: note
the edge (includes/follow.lua), or, when that job has ended there already, the notice at once.
A job pending (in any tier, on the due line, a retry) or fired and not ended in the group gets
the edge; one that ended (its group's record 'S', 'D', 'C' or 'X', newer than its last firing
for every group; its first attempt dropped at its expiry; cancelled while pending) gets the
notice. The edge is written once per token: a replay of this call adds nothing.
KEYS[1]  {T:s}:followers HASH    job id -> the edges of the jobs waiting on it
KEYS[2]  {T:s}:notices   STREAM  outcomes for waiting jobs, moved by the shard's leader
KEYS[3]  {T:s}:jobs      HASH    member -> envelope: the job is pending under its id
KEYS[4]  {T:s}:history   HASH    the job's latest firing and its group's record
KEYS[5]  {T:s}:history_old HASH  the history's previous generation
KEYS[6]  {T:s}:far       HASH    the far tier's meta: the job may be pending there
KEYS[7]  {T:s}:cancelled ZSET    job id -> ms it was cancelled
KEYS[8]  {T:s}:retries   ZSET    pending retries' members (the job pending as a retry alias)
KEYS[9]  {T:s}:inbox     LIST    the leader's inbox (a notice written at once nudges it)
ARGV[1]  topic
ARGV[2]  the job waited on
ARGV[3]  the group whose outcome counts
ARGV[4]  the waiting job's topic
ARGV[5]  its shard
ARGV[6]  its id
ARGV[7]  its token (wheelq.core.follow: one a waiting write)
Returns: {0, 0}  the edge is there (written now, or by an earlier send of this call)
         {0, 1}  the job had ended there: the notice is written
         {0, 2}  nothing is known of the job: nothing written
         {-1, key}   WRONG_TYPE (nothing written)
Includes: base, far_tier, follow, history, status
]]
local wrong = wq_wrong_type(KEYS[1], 'hash', KEYS[2], 'stream', KEYS[3], 'hash', KEYS[4], 'hash',
  KEYS[9], 'list')
if wrong then return wrong end
local id, group, token = ARGV[2], ARGV[3], ARGV[7]
local function edge()
  local raw = redis.call('HGET', KEYS[1], id)
  local edges = raw and cmsgpack.unpack(raw) or {}
  for _, e in ipairs(edges) do
    if e[5] == token then
      return {WQ_OK, 0}
    end
  end
  edges[#edges + 1] = {group, ARGV[4], tonumber(ARGV[5]), ARGV[6], token}
  redis.call('HSET', KEYS[1], id, cmsgpack.pack(edges))
  return {WQ_OK, 0}
end
local function ended(outcome, err)
  redis.call('XADD', KEYS[2], '*', 'n', cmsgpack.pack({ARGV[4], tonumber(ARGV[5]), ARGV[6],
    token, id, group, outcome, err or ''}))
  wq_nudge(KEYS[9], KEYS[1])
  return {WQ_OK, 1}
end
if redis.call('HEXISTS', KEYS[3], id) == 1
    or #redis.call('ZRANGE', KEYS[8], '[' .. id .. WQ_US, '(' .. id .. '\32', 'BYLEX',
      'LIMIT', 0, 1) > 0 then
  return edge()
end
local far = wq_far_state(KEYS[6], nil)
if far.entries > 0 and far:find(id) then
  return edge()
end
local latest = wq_hget(KEYS[4], KEYS[5], id)
local record = wq_read_record(wq_hget(KEYS[4], KEYS[5], id .. WQ_US .. group))
if record and not (latest and wq_id_lt(record[2], latest)) then
  local kind = record[1]
  if kind == 'S' or kind == 'D' or kind == 'C' or kind == 'X' then
    return ended(kind, record[5])
  end
  return edge() -- 'F' or 'R': fired or failed for this group, not ended
end
if latest then
  return edge() -- fired for every group: in the stream or running
end
if wq_hget(KEYS[4], KEYS[5], id .. WQ_EXPIRED) then
  return ended('X', 'expired before it started')
end
if redis.call('ZSCORE', KEYS[7], id) then
  return ended('C', 'cancelled')
end
return {WQ_OK, 2}
