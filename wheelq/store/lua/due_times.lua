--[[ due_times.lua — each member's due ms and stamp wherever it is pending: the sorted set,
else (a job id) the far tier (docs/architecture.md, "The far tier", invariant 14). What a
bulk action's selection records of jobs named by id (docs/architecture.md, "Bulk actions");
nothing written.
KEYS[1]  {T:s}:delayed   ZSET    job id -> due ms
KEYS[2]  {T:s}:jobs      HASH    job id -> envelope
KEYS[3]  {T:s}:far       HASH    the far tier's meta (wq_far_state)
ARGV[1..] members: job ids, or retries' alias members (a batch: at most 500)
Returns: {0, due or false, stamp or false, ...}   per member, in order: its due ms and its
           envelope's stamp (wq_stamp), false and false when not pending
         {-1, key}   WRONG_TYPE
Includes: base, far_tier, job_lists, status
]]
local wrong = wq_wrong_type(KEYS[1], 'zset', KEYS[2], 'hash', KEYS[3], 'hash')
if wrong then return wrong end
local dues = #ARGV > 0 and redis.call('ZMSCORE', KEYS[1], unpack(ARGV)) or {}
local envelopes = #ARGV > 0 and redis.call('HMGET', KEYS[2], unpack(ARGV)) or {}
local far = wq_far_state(KEYS[3])
local out = {WQ_OK}
for i, member in ipairs(ARGV) do
  local due, envelope = dues[i], envelopes[i]
  if not (due and envelope) and far.entries > 0 then -- a job is in one tier at a time
    local found = far:find(member)
    if found then
      due, envelope = wq_fmt(found.due), found.envelope
    end
  end
  if due and envelope then
    out[2 * i], out[2 * i + 1] = due, wq_stamp(envelope)
  else
    out[2 * i], out[2 * i + 1] = false, false
  end
end
return out
