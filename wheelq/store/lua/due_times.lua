--[[ due_times.lua — each member's due ms wherever it is pending: the sorted set, else (a job
id) the far tier (docs/architecture.md, "The far tier", invariant 14). A bulk action's check
that a selected job is still pending; nothing written.
KEYS[1]  {T:s}:delayed   ZSET    job id -> due ms
KEYS[2]  {T:s}:far       HASH    the far tier's meta (wq_far_state)
ARGV[1..] members: job ids, or retries' alias members (a batch: at most 500)
Returns: {0, due or false, ...}   per member, in order: its due ms, false when not pending
         {-1, key}   WRONG_TYPE
]]
local wrong = wq_wrong_type(KEYS[1], 'zset', KEYS[2], 'hash')
if wrong then return wrong end
local dues = #ARGV > 0 and redis.call('ZMSCORE', KEYS[1], unpack(ARGV)) or {}
local far = wq_far_state(KEYS[2])
local out = {WQ_OK}
for i, member in ipairs(ARGV) do
  local due = dues[i]
  if not due and far.entries > 0 then -- a job is in one tier at a time
    local found = far:find(member)
    due = found and wq_fmt(found.due)
  end
  out[i + 1] = due or false
end
return out
