--[[ lookup.lua — what one shard knows of one job id, read in one step (nothing written).
wheelq.core.history turns the reply into a JobInfo; every read is O(1) or O(log n) in the
shard's keys, times the number of consumer groups.
KEYS[1]  {T:s}:delayed   ZSET    job id -> due ms
KEYS[2]  {T:s}:jobs      HASH    job id -> envelope
KEYS[3]  {T:s}:ready     STREAM  fired jobs
KEYS[4]  {T:s}:history   HASH    job id -> latest entry; "id<US>group" -> the group's record
KEYS[5]  {T:s}:history_old HASH  the history's previous generation (asked after KEYS[4])
KEYS[6]  {T:s}:cancelled ZSET    job id -> ms it was cancelled
KEYS[7]  {T:s}:callbacks STREAM  fired jobs that carry a callback: the stream read instead of
         KEYS[3] when it holds the job's entry (or, once that is trimmed, when one of its
         groups keeps a record of the job)
KEYS[8]  {T:s}:far       HASH    the far tier's meta: a pending job not in KEYS[1] may be there
KEYS[9]  {T:s}:held      HASH    the due line's jobs (includes/held.lua): a job due and not yet
         fired may wait there, its envelope still in KEYS[2]
ARGV[1]  job id
Returns: {0, now, due, envelope, cancelled, entry, fields, expired, waiting, group_1..., ...}
           now        TIME, ms
           due        the pending (or waiting) job's due ms (a string), or nil when it is
                      neither
           envelope   the pending (or waiting) job's envelope, or nil
           cancelled  ms it was last cancelled, or nil
           entry      the entry of its latest firing for every group, or nil
           fields     that entry's flat field list while it is in the stream, or nil
           expired    ms a first attempt of it was last dropped at its expiry (wq_expire), or nil
           waiting    1 when the job waits on the due line (due: READY, not in a stream yet),
                      else nil
           group_n    six per consumer group of the job's stream: name, last delivered id, the
                      group's record (or nil), the group's latest entry (the later of entry
                      and the record's), that entry's fields when it is not `entry` (or nil),
                      and while it is pending in the group {consumer, idle ms, deliveries}
                      (or nil)
         {-1, key}   WRONG_TYPE
Includes: base, far_tier, history, status
]]
local wrong = wq_wrong_type(KEYS[1], 'zset', KEYS[2], 'hash', KEYS[3], 'stream', KEYS[4], 'hash',
  KEYS[5], 'hash', KEYS[6], 'zset', KEYS[7], 'stream', KEYS[9], 'hash')
if wrong then return wrong end
local id = ARGV[1]
local stream = KEYS[3]
local function fields_of(entry)
  local found = redis.call('XRANGE', stream, entry, entry)[1]
  return found and found[2] or false
end
-- An entry of `stream` that is this job's: entry ids are per stream, so one of the other
-- stream may have the same id.
local function own_fields(entry)
  local fields = fields_of(entry)
  return fields and wq_fields(fields)['id'] == id and fields
end
local due = redis.call('ZSCORE', KEYS[1], id)
local envelope = due and redis.call('HGET', KEYS[2], id) or false
local waiting = false
if not due then
  local found = wq_far_found(KEYS[8], nil, id)
  if found then
    due, envelope = wq_fmt(found.due), found.envelope
  end
end
if not due then -- on the due line: due, its envelope where it was while pending
  local at = redis.call('HGET', KEYS[9], id)
  envelope = at and redis.call('HGET', KEYS[2], id)
  if envelope then
    due, waiting = string.match(at, '^(%-?%d+)'), 1
  end
end
local entry = wq_hget(KEYS[4], KEYS[5], id)
local fields = entry and own_fields(entry)
if redis.call('EXISTS', KEYS[7]) == 1 and not fields then
  stream = KEYS[7]
  fields = entry and own_fields(entry)
  if not fields then -- in neither stream: the one whose groups keep a record of the job
    local recorded = false
    for _, flat in ipairs(redis.call('XINFO', 'GROUPS', KEYS[7])) do
      recorded = recorded or wq_hget(KEYS[4], KEYS[5], id .. WQ_US .. wq_fields(flat)['name'])
    end
    if not recorded then
      stream = KEYS[3]
    end
  end
end
local out = {WQ_OK, wq_now_ms(), due, envelope, redis.call('ZSCORE', KEYS[6], id), entry,
  fields or false, wq_hget(KEYS[4], KEYS[5], id .. WQ_EXPIRED), waiting}
if redis.call('EXISTS', stream) == 0 then
  return out
end
for _, flat in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
  local g = wq_fields(flat)
  local raw = wq_hget(KEYS[4], KEYS[5], id .. WQ_US .. g['name'])
  local record = wq_read_record(raw)
  local latest = entry
  if record and (not latest or wq_id_lt(latest, record[2])) then
    latest = record[2]
  end
  local fields, pending = false, false
  if latest then
    if latest ~= entry then
      fields = fields_of(latest)
    end
    local p = redis.call('XPENDING', stream, g['name'], latest, latest, 1)[1]
    if p then
      pending = {p[2], p[3], p[4]}
    end
  end
  for _, v in ipairs({g['name'], g['last-delivered-id'], raw, latest, fields, pending}) do
    out[#out + 1] = v
  end
end
return out
